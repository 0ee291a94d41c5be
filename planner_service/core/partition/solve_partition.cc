#include "pipeplan/core/solve_partition.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pipeplan {
namespace {

std::unique_ptr<Partitioner> MakePartitioner(PartitionMethod method) {
  switch (method) {
    case PartitionMethod::kDp:
      return MakeChainDpPartitioner();
    case PartitionMethod::kIdealDp:
      return MakeLatticeDpPartitioner();
    case PartitionMethod::kMilp:
      return MakeMilpPartitioner();
    case PartitionMethod::kUniform:
      return MakeUniformPartitioner();
    case PartitionMethod::kParams:
      return MakeParamsPartitioner();
    case PartitionMethod::kTime:
      return MakeTimeBlockPartitioner();
    case PartitionMethod::kAuto:
      break;
  }
  return nullptr;
}

double Gap(double objective, double lower_bound) {
  if (!(objective > 0) || std::isinf(objective)) return 0;
  return std::max(0.0, (objective - lower_bound) / objective);
}

// The methods run on one problem so far: the best valid split, the
// tightest bound, the first error worth reporting and every outcome.
class Runs {
 public:
  explicit Runs(const PartitionProblem& problem)
      : problem_(problem), lower_(BalanceLowerBound(problem)) {}

  void Run(PartitionMethod m, const PartitionProblem& prob);
  // Every method: cheap ones first; the exact DAG solvers only while the
  // proven gap is above the target, the MILP last, warm-started from the
  // best split so far so it can only improve on it.
  void RunAll();
  absl::StatusOr<PlanResult> Finish(absl::Time start) &&;

 private:
  void Absorb(absl::StatusOr<Partition> got, MethodOutcome& outcome);
  bool GapOpen() const { return !best_ || Gap(best_->objective, lower_) > problem_.relative_gap; }

  const PartitionProblem& problem_;
  PlanResult result_;
  double lower_;
  std::optional<Partition> best_;
  std::string best_method_;
  absl::Status first_error_ = absl::OkStatus();
};

void Runs::Run(PartitionMethod m, const PartitionProblem& prob) {
  const absl::Time t0 = absl::Now();
  auto got = MakePartitioner(m)->Solve(prob);
  MethodOutcome outcome{.method = std::string(PartitionMethodName(m)),
                        .seconds = absl::ToDoubleSeconds(absl::Now() - t0)};
  Absorb(std::move(got), outcome);
  result_.candidates.push_back(std::move(outcome));
}

void Runs::Absorb(absl::StatusOr<Partition> got, MethodOutcome& outcome) {
  if (!got.ok()) {
    outcome.note = std::string(got.status().message());
    // The DP's memory error carries the memory needed; prefer it.
    if (first_error_.ok() || got.status().code() == absl::StatusCode::kFailedPrecondition) {
      if (first_error_.code() != absl::StatusCode::kFailedPrecondition) first_error_ = got.status();
    }
    return;
  }
  outcome.note = got->note;
  result_.nodes_explored += got->nodes_explored;
  if (got->contracted_nodes > 0) result_.contracted_nodes = got->contracted_nodes;
  lower_ = std::max(lower_, got->lower_bound);
  if (!got->fits_memory) {
    outcome.note = absl::StrCat("does not fit in memory; ", outcome.note);
    return;
  }
  outcome.objective = got->objective;
  if (!best_ || got->objective < best_->objective) {
    best_ = std::move(*got);
    best_method_ = outcome.method;
  }
}

void Runs::RunAll() {
  for (PartitionMethod m : {PartitionMethod::kDp, PartitionMethod::kTime, PartitionMethod::kParams,
                            PartitionMethod::kUniform}) {
    if (problem_.ShouldStop() && best_) break;
    Run(m, problem_);
  }
  if (GapOpen() && !(problem_.ShouldStop() && best_)) Run(PartitionMethod::kIdealDp, problem_);
  // Also when nothing fit so far: the MILP searches every DAG split, not
  // one order, so it may find a split that fits in memory.
  if (GapOpen() && !problem_.ShouldStop()) {
    PartitionProblem warm = problem_;
    std::vector<int> incumbent;
    if (best_) incumbent = best_->stage_of_node;
    warm.warm_start = incumbent;
    Run(PartitionMethod::kMilp, warm);
  }
}

absl::StatusOr<PlanResult> Runs::Finish(absl::Time start) && {
  if (!best_) {
    if (!first_error_.ok()) return first_error_;
    return absl::FailedPreconditionError("no method found a split that fits in memory");
  }
  // The solvers charge every tensor's gradient; with outputs that carry none
  // only the balance bound is sure to hold.
  if (problem_.graph().has_outputs_without_grad()) lower_ = BalanceLowerBound(problem_);
  lower_ = std::min(lower_, best_->objective);
  PlanResult result = std::move(result_);
  result.partition = std::move(*best_);
  result.method = best_method_;
  result.lower_bound = lower_;
  result.partition.lower_bound = lower_;
  result.gap = Gap(result.partition.objective, lower_);
  result.stage_device = problem_.stage_device;
  result.stage_inflight = problem_.stage_inflight;
  result.solve_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

}  // namespace

absl::StatusOr<PlanResult> SolvePartition(const PartitionProblem& problem, PartitionMethod method) {
  const absl::Time start = absl::Now();
  Runs runs(problem);
  if (method != PartitionMethod::kAuto) {
    runs.Run(method, problem);
  } else {
    runs.RunAll();
  }
  return std::move(runs).Finish(start);
}

}  // namespace pipeplan
