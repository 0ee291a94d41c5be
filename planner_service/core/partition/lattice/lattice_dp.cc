// The ideal_dp partitioner: exact bottleneck DP over the lattice of ideals
// (downward-closed node sets) of the DAG. RELAY is solved exactly by the
// separable DP; DIRECT by the separable lower bound, then the pair DP. Free
// sources are glued to their consumer; memory caps are searched only when the
// memory-free split does not fit. Derivation: docs/partitioning.md,
// "Ideal-lattice DP".
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "direct_pair_dp.h"
#include "ideal_lattice.h"
#include "partition/contraction.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/partition.h"
#include "separable_dp.h"
#include "zero_cost_merge.h"

namespace pipeplan {
namespace lattice_dp_internal {
namespace {

// One ideal_dp solve: the searches in order, the best split so far and the
// best proven bound.
class LatticeSolve {
 public:
  LatticeSolve(const PartitionProblem& problem, const Lattice& lat)
      : problem_(problem),
        g_(problem.graph()),
        lat_(lat),
        dp_(problem, lat),
        relay_(problem.cost->options().comm_model == CommModel::kRelay),
        glued_(std::any_of(lat.glue.begin(), lat.glue.end(), [](int c) { return c >= 0; })),
        floor_(BalanceLowerBound(problem)) {}

  absl::StatusOr<Partition> Run() {
    PIPEPLAN_RETURN_IF_ERROR(SearchRelay());
    if (!relay_ && !stopped_) PIPEPLAN_RETURN_IF_ERROR(SearchDirect());
    bool memory_proven_infeasible = false;
    if (inc_.best && !inc_.best->fits_memory && !stopped_) {
      PIPEPLAN_ASSIGN_OR_RETURN(memory_proven_infeasible, SearchWithinMemory());
    }
    if (relay_ && glued_ && !stopped_) PIPEPLAN_RETURN_IF_ERROR(BoundRelayGlued());
    return Finish(memory_proven_infeasible);
  }

 private:
  // 1. Memory-free search with the RELAY charge: exact for RELAY (its
  //    infeasible T bounds every split), an upper-bound charge for DIRECT.
  absl::Status SearchRelay();
  // 2. DIRECT: first the separable lower-bound charge (memory ignored): its
  //    largest infeasible T bounds every split and clamps the pair DP; its
  //    chains are valid splits (not offered when empty stages are admitted,
  //    docs/partitioning.md, "Free sources"). Then the pair DP.
  absl::Status SearchDirect();
  // The pair DP with the fastest links (memory ignored), pruned by the best
  // objective so far: its optimum bounds every split (minus the glued work)
  // and its chain is evaluated exactly.
  absl::Status RunPairDp(double clamp);
  // With links that differ between stage pairs, a second pair DP charges
  // every stage its slowest links (an upper bound) for a split that is good
  // under the real links. `fastest` is the fastest-link pass.
  absl::Status RunSlowestLinks(DirectDp& direct, const DirectDp::Result& fastest, double clamp);
  // 3. The best split does not fit: search again under the memory caps.
  //    True when that proves no split fits.
  absl::StatusOr<bool> SearchWithinMemory();
  // 4. RELAY with glued sources: the RELAY charge with empty stages
  //    admitted bounds every split (docs/partitioning.md, "Free sources");
  //    its chains are not offered.
  absl::Status BoundRelayGlued();
  absl::StatusOr<Partition> Finish(bool memory_proven_infeasible);

  const PartitionProblem& problem_;
  const Graph& g_;
  const Lattice& lat_;
  SeparableDp dp_;
  Incumbent inc_;
  const bool relay_, glued_;
  const double floor_;
  double dp_lower_ = 0;
  bool stopped_ = false;
  bool direct_done_ = false, direct_exact_ = false;
  int64_t direct_pairs_ = 0;
  std::string direct_note_;
};

absl::Status LatticeSolve::SearchRelay() {
  dp_.SetCharge(Charge::kRelay);
  PIPEPLAN_ASSIGN_OR_RETURN(SearchResult a, Search(problem_, lat_, dp_, false, floor_, inc_));
  stopped_ = a.stopped;
  if (relay_ && !a.stopped && !glued_) dp_lower_ = a.lower;
  return absl::OkStatus();
}

absl::Status LatticeSolve::SearchDirect() {
  if (!problem_.warm_start.empty() &&
      static_cast<int>(problem_.warm_start.size()) == g_.num_nodes()) {
    // A caller's split that is not valid is ignored.
    (void)inc_.Offer(problem_,
                     std::vector<int>(problem_.warm_start.begin(), problem_.warm_start.end()));
  }
  dp_.SetCharge(Charge::kDirectLower);
  dp_.set_allow_empty(glued_);
  PIPEPLAN_ASSIGN_OR_RETURN(SearchResult c, Search(problem_, lat_, dp_, false, floor_, inc_));
  dp_.set_allow_empty(false);
  stopped_ |= c.stopped;
  double clamp = 0;
  if (!c.stopped) dp_lower_ = clamp = c.lower;
  if (stopped_ || !(inc_.min_objective < kInf)) return absl::OkStatus();
  return RunPairDp(clamp);
}

absl::Status LatticeSolve::RunPairDp(double clamp) {
  DirectDp direct(problem_, lat_);
  if (!direct.BuildCrossing(kMaxCrossingEntries)) {
    direct_note_ = "; crossing lists over budget, separable DIRECT bound";
    direct_pairs_ = direct.pairs();
    return absl::OkStatus();
  }
  DirectDp::Result d = direct.Run(inc_.min_objective, clamp, glued_, kMaxPairs);
  stopped_ |= d.stopped;
  if (!d.chain.empty()) {
    PIPEPLAN_RETURN_IF_ERROR(inc_.Offer(problem_, StageOfNode(g_, lat_, d.chain)));
  }
  if (d.complete) {
    direct_done_ = true;
    const bool uniform = direct.UniformLinks();
    direct_exact_ = uniform && !glued_;
    // Nothing at or below a known split's value can only be rounding; that
    // split's value then bounds every split.
    dp_lower_ = std::max(dp_lower_, d.bound < kInf ? d.bound : inc_.min_objective);
    if (!uniform && !stopped_ && inc_.min_objective > dp_lower_ * (1 + problem_.relative_gap)) {
      PIPEPLAN_RETURN_IF_ERROR(RunSlowestLinks(direct, d, clamp));
    }
  } else if (!d.stopped) {
    direct_note_ =
        absl::StrCat("; pair DP over budget (", direct.pairs(), " pairs), separable DIRECT bound");
  }
  direct_pairs_ = direct.pairs();
  return absl::OkStatus();
}

absl::Status LatticeSolve::RunSlowestLinks(DirectDp& direct, const DirectDp::Result& fastest,
                                           double clamp) {
  const int64_t before = direct.pairs();
  // Its optimum is at least the fastest-link one.
  const double worst_clamp = fastest.value < kInf ? fastest.value * (1 - 1e-9) : clamp;
  DirectDp::Result w =
      direct.Run(inc_.min_objective, worst_clamp, false, kMaxPairs + before, LinkMode::kWorst);
  stopped_ |= w.stopped;
  if (!w.chain.empty()) {
    PIPEPLAN_RETURN_IF_ERROR(inc_.Offer(problem_, StageOfNode(g_, lat_, w.chain)));
  }
  auto ms = [](double v) {
    return v < kInf ? absl::StrCat(v * 1e3, " ms") : std::string("none below");
  };
  direct_note_ = absl::StrCat("; stage links differ: fastest-link pass ", ms(fastest.value),
                              " (the bound), slowest-link pass ",
                              w.complete ? ms(w.value) : std::string("incomplete"), ", best split ",
                              ms(inc_.min_objective));
  return absl::OkStatus();
}

absl::StatusOr<bool> LatticeSolve::SearchWithinMemory() {
  PIPEPLAN_ASSIGN_OR_RETURN(SearchResult b, Search(problem_, lat_, dp_, true, floor_, inc_));
  stopped_ |= b.stopped;
  if (b.feasible) return false;
  // The memory the DP charges is exact without tied parameters.
  std::vector<int> seen(g_.num_param_groups(), 0);
  for (int v = 0; v < g_.num_nodes(); ++v) {
    if (g_.param_group(v) >= 0 && seen[g_.param_group(v)]++) return false;
  }
  return true;
}

absl::Status LatticeSolve::BoundRelayGlued() {
  dp_.SetCharge(Charge::kRelay);
  dp_.set_allow_empty(true);
  PIPEPLAN_ASSIGN_OR_RETURN(SearchResult c, Search(problem_, lat_, dp_, false, floor_, inc_));
  dp_.set_allow_empty(false);
  if (!c.stopped) dp_lower_ = c.lower;
  stopped_ |= c.stopped;
  return absl::OkStatus();
}

absl::StatusOr<Partition> LatticeSolve::Finish(bool memory_proven_infeasible) {
  if (!inc_.best) {
    return absl::InternalError("ideal_dp found no chain of ideals");  // k <= n rules this out
  }
  if (memory_proven_infeasible) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model does not fit in memory on any split into ", problem_.num_stages(),
        " stages; add devices or stages, lower microbatches in flight, or use a smaller "
        "optimizer state"));
  }
  // Gluing may add the glued work to a stage (docs/partitioning.md, "Free sources").
  double max_slow = 0;
  for (int d : problem_.stage_device) max_slow = std::max(max_slow, problem_.cost->slowdown(d));
  const double lower = std::max(floor_, dp_lower_ - lat_.glued_work * max_slow);
  Partition result = std::move(*inc_.best);
  // Guard against rounding in the DP's prefix sums.
  result.lower_bound = std::min(lower * (1 - 1e-9), result.objective);
  result.nodes_explored = dp_.explored() + direct_pairs_;
  const char* kind = relay_          ? "exact (RELAY)"
                     : direct_exact_ ? "exact (DIRECT, pair DP)"
                     : direct_done_  ? "bounded (DIRECT, pair DP)"
                                     : "bounded (DIRECT, separable)";
  result.note = absl::StrCat(kind, ", ", lat_.size(), " ideals in ", lat_.segs.size(), " segments",
                             direct_note_, stopped_ ? "; stopped early" : "",
                             result.fits_memory ? "" : "; no split within memory found");
  return result;
}

class LatticeDpPartitioner : public Partitioner {
 public:
  std::string_view name() const override { return "ideal_dp"; }

  absl::StatusOr<Partition> Solve(const PartitionProblem& problem) const override {
    PIPEPLAN_RETURN_IF_ERROR(ValidateProblem(problem));
    std::optional<GroupedGraph> merged = MergeZeroCostNodes(*problem.cost);
    if (!merged || merged->graph->num_nodes() < problem.num_stages()) return SolveAsIs(problem);
    return SolveMerged(problem, *merged);
  }

 private:
  static absl::StatusOr<Partition> SolveAsIs(const PartitionProblem& problem) {
    PIPEPLAN_ASSIGN_OR_RETURN(
        Lattice lat, BuildLattice(problem.graph(), problem.cost, LatticeLimits{}, &problem));
    return LatticeSolve(problem, lat).Run();
  }

  // Splits the merged graph and evaluates its split on the graph. A split of
  // the graph that a merge separates either costs no less merged or has a
  // stage with no work, which FreeSourceFallbackBound bounds.
  static absl::StatusOr<Partition> SolveMerged(const PartitionProblem& problem,
                                               const GroupedGraph& merged) {
    const CostModel cost(*merged.graph, problem.cost->cluster(), problem.cost->options());
    PartitionProblem small = problem;
    small.cost = &cost;
    std::vector<int> warm;
    small.warm_start = {};
    if (static_cast<int>(problem.warm_start.size()) == problem.graph().num_nodes()) {
      warm.assign(merged.graph->num_nodes(), -1);
      for (int v = 0; v < problem.graph().num_nodes(); ++v) {
        warm[merged.group_of_node[v]] = problem.warm_start[v];
      }
      small.warm_start = warm;
    }
    PIPEPLAN_ASSIGN_OR_RETURN(Partition part, SolveAsIs(small));
    PIPEPLAN_ASSIGN_OR_RETURN(Partition out,
                              MakePartition(problem, merged.Expand(part.stage_of_node)));
    out.lower_bound = std::min({part.lower_bound, FreeSourceFallbackBound(problem), out.objective});
    out.nodes_explored = part.nodes_explored;
    out.note =
        absl::StrCat(part.note, "; ", problem.graph().num_nodes() - merged.graph->num_nodes(),
                     " zero-cost nodes merged first");
    return out;
  }
};

}  // namespace
}  // namespace lattice_dp_internal

std::unique_ptr<Partitioner> MakeLatticeDpPartitioner() {
  return std::make_unique<lattice_dp_internal::LatticeDpPartitioner>();
}

}  // namespace pipeplan
