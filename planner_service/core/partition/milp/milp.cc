// The milp partitioner: CBC on the mixed-integer program over a contraction
// of the DAG, warm-started from the best split known, with a lower bound that
// holds for the original problem (communication bound, exact models after a
// lossy presolve). Derivation: docs/partitioning.md, "MILP".
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cbc_solve.h"
#include "comm_bound.h"
#include "milp_model.h"
#include "partition/contraction.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/partition.h"

namespace pipeplan {
namespace milp_internal {
namespace {

// Above this many prefix variables (super-nodes x (stages - 1)) the presolve
// contracts lossily, and the exact bound model is not attempted.
constexpr int kTargetPrefixVars = 2400;
constexpr int kMaxExactPrefixVars = 12000;

// Smallest factor by which every device's memory must grow for some split of
// the topological order into contiguous stages to fit, and the bytes that
// split's fullest stage needs. Greedy maximal stages are optimal for a fixed
// factor because stage memory only grows with the stage.
std::pair<double, double> MemoryNeed(const PartitionProblem& problem) {
  const CostModel& cost = *problem.cost;
  const Graph& g = cost.graph();
  const int n = g.num_nodes(), k = problem.num_stages();
  const double psf = cost.param_state_factor();
  auto fits = [&](double factor, double* fullest) {
    int pos = 0;
    std::vector<int> seen(g.num_param_groups(), -1);
    for (int j = 0; j < k; ++j) {
      const double cap = StageMemoryCap(problem, j) * factor;
      double act = 0, params = 0;
      const int start = pos;
      while (pos < n - (k - 1 - j)) {
        const int v = g.topo_order()[pos];
        double add_params = 0;
        const int grp = g.param_group(v);
        if (grp >= 0 && seen[grp] != j) add_params = g.param_group_bytes(grp);
        const double mem = (act + cost.activation_bytes(v)) * problem.stage_inflight[j] +
                           psf * (params + add_params);
        if (mem > cap && pos > start) break;
        if (mem > cap) return false;
        act += cost.activation_bytes(v);
        params += add_params;
        if (grp >= 0) seen[grp] = j;
        ++pos;
        if (fullest) *fullest = std::max(*fullest, mem);
      }
      if (pos == start) return false;
    }
    return pos == n;
  };
  double lo = 1, hi = 2;
  while (!fits(hi, nullptr)) {
    lo = hi;
    hi *= 2;
    if (hi > 1e15) return {kInf, kInf};
  }
  for (int it = 0; it < 50; ++it) {
    const double mid = (lo + hi) / 2;
    (fits(mid, nullptr) ? hi : lo) = mid;
  }
  double fullest = 0;
  fits(hi, &fullest);
  return {hi, fullest};
}

// One MILP solve: the incumbent, the bounds proven so far and the report.
class MilpSolve {
 public:
  explicit MilpSolve(const PartitionProblem& problem)
      : problem_(problem), k_(problem.num_stages()), proven_lb_(BalanceLowerBound(problem)) {}

  absl::StatusOr<Partition> Run() {
    // Incumbent: the caller's warm start, else the chain DP.
    if (!problem_.warm_start.empty()) {
      Offer(std::vector<int>(problem_.warm_start.begin(), problem_.warm_start.end()));
    }
    t0_ = absl::Now();
    SetStopTime();
    if (!best_) SeedFromChainDp();
    Contraction exact_con = BoundCommunication();
    Contraction con = ContractForPhase1();
    const bool gap_closed =
        best_ && best_->objective - proven_lb_ <= problem_.relative_gap * best_->objective;
    if (!gap_closed && !problem_.ShouldStop()) {
      RunPhases(con, std::move(exact_con));
    } else if (gap_closed) {
      stop_ = "communication bound closed the gap";
    } else {
      stop_ = "deadline before the MILP";
    }
    if (!best_) return NoSplitError();
    return Finish();
  }

 private:
  // Keeps the best split that fits in memory.
  void Offer(std::vector<int> stage_of_node);
  // CBC stops a little before the deadline to leave time for the work
  // after it (re-evaluating incumbents, freeing the model).
  void SetStopTime();
  void SeedFromChainDp();
  // The communication bound on the exact contraction (free sources only),
  // which it returns.
  Contraction BoundCommunication();
  // Phase 1's contraction: lossy when the graph is large, or when the time
  // is short; never across the incumbent's cuts.
  Contraction ContractForPhase1() const;
  // Phase 1 on `con`; after a lossy contraction (or an infeasibility proof
  // that merged free sources), phase 2: a valid bound (and maybe a better
  // split) from an exact model.
  void RunPhases(const Contraction& con, Contraction exact_con);
  // Builds and solves the model of `c` until `until`, offering every
  // candidate it finds.
  CbcOutcome RunModel(const Contraction& c, absl::Time until);
  // Takes the outcome's bound (or infeasibility proof) when it holds for the
  // original problem.
  void AbsorbBound(const Contraction& c, const CbcOutcome& o);
  // Whether the exact model of `c` is small enough for the time left.
  bool ExactFits(const Contraction& c) const;
  double SecondsLeft() const { return absl::ToDoubleSeconds(stop_at_ - absl::Now()); }
  absl::Status NoSplitError() const;
  Partition Finish();

  const PartitionProblem& problem_;
  const int k_;
  double proven_lb_;
  double balance_lb_ = 0;  // proven_lb_ before any MILP ran
  std::optional<Partition> best_;
  int64_t nodes_ = 0;
  absl::Time t0_, stop_at_;
  bool exact_merged_ = false;  // the exact contraction merged free sources
  CommBound comm_;
  bool bound_valid_ = false;  // model_bound_ holds for the original
  double model_bound_ = -kInf;
  bool proven_infeasible_ = false;
  std::string how_, stop_ = "skipped";
  int super_nodes_ = 0;
  double cbc_seconds_ = 0;
};

void MilpSolve::Offer(std::vector<int> stage_of_node) {
  auto p = MakePartition(problem_, std::move(stage_of_node));
  if (!p.ok() || !p->fits_memory) return;
  if (!best_ || p->objective < best_->objective) best_ = std::move(*p);
}

void MilpSolve::SetStopTime() {
  stop_at_ = problem_.deadline;
  if (stop_at_ != absl::InfiniteFuture()) {
    const double budget = std::max(0.0, absl::ToDoubleSeconds(stop_at_ - t0_));
    stop_at_ -= absl::Seconds(std::clamp(0.02 * budget, 0.01, 0.1));
  }
}

void MilpSolve::SeedFromChainDp() {
  auto dp = MakeChainDpPartitioner()->Solve(problem_);
  if (!dp.ok()) return;
  proven_lb_ = std::max(proven_lb_, std::min(dp->lower_bound, dp->objective));
  nodes_ += dp->nodes_explored;
  if (dp->fits_memory) Offer(dp->stage_of_node);
}

Contraction MilpSolve::BoundCommunication() {
  const absl::Time t1 = absl::Now();
  Contraction exact_con = Contract(problem_, ContractionOptions{});
  exact_merged_ = exact_con.merged_free_sources;
  if (best_) {
    comm_ = CommLowerBound(problem_, exact_con, proven_lb_, best_->objective);
    double b = comm_.bound;
    if (exact_con.merged_free_sources) b = std::min(b, FreeSourceFallbackBound(problem_));
    proven_lb_ = std::max(proven_lb_, b);
  }
  balance_lb_ = proven_lb_;
  Trace(problem_, "comm bound", t1);
  return exact_con;
}

Contraction MilpSolve::ContractForPhase1() const {
  const double size_scale = std::clamp(SecondsLeft() / 2, 0.1, 1.0);
  const int target =
      std::max(40, static_cast<int>(kTargetPrefixVars * size_scale) / std::max(1, k_ - 1));
  ContractionOptions copt;
  copt.merge_free_sources = true;
  double total_work = 0, largest = 0;
  for (int v = 0; v < problem_.graph().num_nodes(); ++v) {
    total_work += problem_.cost->work_ref(v);
    largest = std::max(largest, problem_.cost->work_ref(v));
  }
  copt.target_super_nodes = target;
  copt.max_super_work = std::max(largest, total_work / (6.0 * k_));
  if (best_) copt.keep_cuts = best_->stage_of_node;
  const absl::Time ct = absl::Now();
  Contraction con = Contract(problem_, copt);
  Trace(problem_, "contract", ct);
  return con;
}

void MilpSolve::RunPhases(const Contraction& con, Contraction exact_con) {
  // After a lossy contraction keep half of the time for the exact model.
  absl::Time until = stop_at_;
  if (con.lossy && stop_at_ != absl::InfiniteFuture() && ExactFits(exact_con)) {
    until = absl::Now() + (stop_at_ - absl::Now()) / 2;
  }
  CbcOutcome out = RunModel(con, until);
  AbsorbBound(con, out);

  // Phase 2: a valid bound (and maybe a better split) from an exact model.
  const bool need_exact =
      (con.lossy || (out.proven_infeasible && con.merged_free_sources)) && !problem_.ShouldStop();
  if (!need_exact) return;
  const bool retry = out.proven_infeasible && con.merged_free_sources && !con.lossy;
  ContractionOptions exact;
  exact.merge_free_sources = !retry;
  Contraction con2 = retry ? Contract(problem_, exact) : std::move(exact_con);
  if (ExactFits(con2)) {
    CbcOutcome out2 = RunModel(con2, stop_at_);
    AbsorbBound(con2, out2);
  } else {
    stop_ = absl::StrCat(stop_, "; exact model skipped (", con2.num_super, " super-nodes)");
  }
}

CbcOutcome MilpSolve::RunModel(const Contraction& c, absl::Time until) {
  const absl::Time b0 = absl::Now();
  // The communication rows hold for splits of the free-source contraction,
  // which every model merges unless it is the retry without that merge.
  const bool use_need = c.merged_free_sources == exact_merged_;
  const MilpModel model(
      problem_, c, proven_lb_,
      use_need ? std::span<const double>(comm_.need_at_ub) : std::span<const double>());
  Trace(problem_, "build model", b0);
  std::vector<int> warm;
  const std::vector<int>* warm_ptr = nullptr;
  if (best_ && c.Restrict(best_->stage_of_node, &warm)) warm_ptr = &warm;
  const absl::Time c0 = absl::Now();
  CbcOutcome out = RunCbc(problem_, model, warm_ptr, until);
  cbc_seconds_ += absl::ToDoubleSeconds(absl::Now() - c0);
  nodes_ += out.nodes;
  for (const auto& cand : out.candidates) Offer(c.Expand(cand));
  super_nodes_ = c.num_super;
  how_ = absl::StrFormat("%d super-nodes%s, %d rows, %d cols", c.num_super,
                         c.lossy ? " (lossy)" : "", model.num_rows(), model.num_cols());
  stop_ = out.stop;
  return out;
}

void MilpSolve::AbsorbBound(const Contraction& c, const CbcOutcome& o) {
  if (c.lossy) return;
  if (o.proven_infeasible) {
    if (!c.merged_free_sources) proven_infeasible_ = true;
    return;
  }
  double b = o.bound;
  if (c.merged_free_sources) b = std::min(b, FreeSourceFallbackBound(problem_));
  model_bound_ = std::max(model_bound_, b);
  bound_valid_ = true;
}

bool MilpSolve::ExactFits(const Contraction& c) const {
  const double scale = std::clamp(SecondsLeft() / 5, 0.0, 1.0);
  return static_cast<int64_t>(c.num_super) * (k_ - 1) <= kMaxExactPrefixVars * scale &&
         SecondsLeft() > 0.3;
}

absl::Status MilpSolve::NoSplitError() const {
  if (proven_infeasible_) {
    const auto [factor, bytes] = MemoryNeed(problem_);
    return absl::FailedPreconditionError(absl::StrFormat(
        "no split into %d stages fits in memory (proven by the MILP); the best split of a "
        "topological order needs %.4g bytes (%.2f GiB) on its fullest stage, %.3gx the "
        "devices' memory",
        k_, bytes, bytes / (1 << 30), factor));
  }
  if (problem_.cancelled != nullptr && problem_.cancelled->load()) {
    return absl::CancelledError("MILP cancelled before finding a split that fits");
  }
  if (problem_.ShouldStop()) {
    return absl::DeadlineExceededError("MILP reached its deadline before finding a split");
  }
  return absl::FailedPreconditionError(
      "MILP found no split that fits in memory and could not prove infeasibility");
}

Partition MilpSolve::Finish() {
  Partition result = std::move(*best_);
  result.contracted_nodes = super_nodes_;
  double lb = balance_lb_;
  if (bound_valid_) lb = std::max(lb, model_bound_);
  result.lower_bound = std::min(lb, result.objective);
  result.nodes_explored = nodes_;
  const double gap =
      result.objective > 0 ? (result.objective - result.lower_bound) / result.objective : 0;
  result.note = absl::StrFormat("milp: %s; %s; gap %.3g (bound: %s); %.2fs (cbc %.2fs)",
                                how_.empty() ? "no model" : how_, stop_, gap,
                                bound_valid_ && model_bound_ >= balance_lb_ ? "model"
                                : balance_lb_ > BalanceLowerBound(problem_) ? "communication/DP"
                                                                            : "balance",
                                absl::ToDoubleSeconds(absl::Now() - t0_), cbc_seconds_);
  return result;
}

class MilpPartitioner : public Partitioner {
 public:
  std::string_view name() const override { return "milp"; }

  absl::StatusOr<Partition> Solve(const PartitionProblem& problem) const override {
    PIPEPLAN_RETURN_IF_ERROR(ValidateProblem(problem));
    return MilpSolve(problem).Run();
  }
};

}  // namespace
}  // namespace milp_internal

std::unique_ptr<Partitioner> MakeMilpPartitioner() {
  return std::make_unique<milp_internal::MilpPartitioner>();
}

}  // namespace pipeplan
