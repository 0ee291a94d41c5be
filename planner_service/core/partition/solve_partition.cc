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

}  // namespace

absl::StatusOr<PlanResult> SolvePartition(const PartitionProblem& problem, PartitionMethod method) {
  const absl::Time start = absl::Now();
  PlanResult result;
  double lower = BalanceLowerBound(problem);
  std::optional<Partition> best;
  std::string best_method;
  absl::Status first_error = absl::OkStatus();

  auto run = [&](PartitionMethod m, const PartitionProblem& prob) {
    const absl::Time t0 = absl::Now();
    auto got = MakePartitioner(m)->Solve(prob);
    MethodOutcome outcome{.method = std::string(PartitionMethodName(m)),
                          .seconds = absl::ToDoubleSeconds(absl::Now() - t0)};
    if (!got.ok()) {
      outcome.note = std::string(got.status().message());
      // The DP's memory error carries the memory needed; prefer it.
      if (first_error.ok() || got.status().code() == absl::StatusCode::kFailedPrecondition) {
        if (first_error.code() != absl::StatusCode::kFailedPrecondition) first_error = got.status();
      }
    } else {
      outcome.note = got->note;
      result.nodes_explored += got->nodes_explored;
      if (got->contracted_nodes > 0) result.contracted_nodes = got->contracted_nodes;
      lower = std::max(lower, got->lower_bound);
      if (got->fits_memory) {
        outcome.objective = got->objective;
        if (!best || got->objective < best->objective) {
          best = std::move(*got);
          best_method = outcome.method;
        }
      } else {
        outcome.note = absl::StrCat("does not fit in memory; ", outcome.note);
      }
    }
    result.candidates.push_back(std::move(outcome));
  };

  if (method != PartitionMethod::kAuto) {
    run(method, problem);
  } else {
    // Cheap methods first; the exact DAG solvers run only while the proven
    // gap is above the target, and the MILP last, warm-started from the best
    // split so far so it can only improve on it.
    for (PartitionMethod m : {PartitionMethod::kDp, PartitionMethod::kTime,
                              PartitionMethod::kParams, PartitionMethod::kUniform}) {
      if (problem.ShouldStop() && best) break;
      run(m, problem);
    }
    auto gap_open = [&] { return !best || Gap(best->objective, lower) > problem.relative_gap; };
    if (gap_open() && !(problem.ShouldStop() && best)) run(PartitionMethod::kIdealDp, problem);
    // Also when nothing fit so far: the MILP searches every DAG split, not
    // one order, so it may find a split that fits in memory.
    if (gap_open() && !problem.ShouldStop()) {
      PartitionProblem warm = problem;
      std::vector<int> incumbent;
      if (best) incumbent = best->stage_of_node;
      warm.warm_start = incumbent;
      run(PartitionMethod::kMilp, warm);
    }
  }
  if (!best) {
    if (!first_error.ok()) return first_error;
    return absl::FailedPreconditionError("no method found a split that fits in memory");
  }
  // The solvers charge every tensor's gradient; with outputs that carry none
  // only the balance bound is sure to hold.
  if (problem.graph().has_outputs_without_grad()) lower = BalanceLowerBound(problem);
  lower = std::min(lower, best->objective);
  result.partition = std::move(*best);
  result.method = best_method;
  result.lower_bound = lower;
  result.partition.lower_bound = lower;
  result.gap = Gap(result.partition.objective, lower);
  result.stage_device = problem.stage_device;
  result.stage_inflight = problem.stage_inflight;
  result.solve_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

}  // namespace pipeplan
