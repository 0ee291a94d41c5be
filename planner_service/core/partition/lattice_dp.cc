// Exact bottleneck DP over the lattice of ideals of the DAG ("ideal_dp"),
// after Tarnawski et al., "Efficient algorithms for device placement of DNN
// graph operators" (NeurIPS 2020).
//
// Splits and ideals. An ideal is a downward-closed node set. Every valid split
// into k stages is a chain of ideals  ∅ = I_0 ⊊ I_1 ⊊ ... ⊊ I_k = V  with
// stage j = I_{j+1} \ I_j, and every such chain is a valid split.
//
// Lattice structure. A separator is a node comparable with every other node.
// Separators s_1 < s_2 < ... cut the topological order into segments G_0 (the
// nodes before s_1), G_1 (between s_1 and s_2), ... Every ideal is uniquely
//   (all nodes up to and including s_i) ∪ X,   X an ideal of G_i
// (s_0 is a virtual separator before the first node), so the ideals are
// enumerated segment by segment: per segment a BFS over bitmasks that adds
// one node whose in-segment predecessors are present. The global order
// (segment, then BFS layer) is compatible with inclusion.
//
// Separable costs. Under RELAY a stage between ideals I ⊊ J on device d_j costs
//   (W(J) - W(I))·slow_j + cut_{j-1}(I) + cut_j(J)
// where W is reference work and cut_b(I) = 2·Σ TransferSeconds(d_b, d_b+1,
// bytes_v) over tensors v produced in I and consumed outside it (bytes_v the
// largest of v's edges leaving I). This is exactly CostModel::Evaluate.
// With h_j(I) = W(I)·slow_j - cut_{j-1}(I) and g_j(J) = W(J)·slow_j + cut_j(J)
// the stage fits a bottleneck T iff h_j(I) >= g_j(J) - T, so the feasibility
// test for T is
//   S_0 = {∅},  S_{j+1} = {J : max{h_j(I) : I ∈ S_j, I ⊊ J} >= g_j(J) - T}
// and the max over strict sub-ideals is a down-set maximum computed in one
// pass in inclusion order: D(J) = max(h(J) if J ∈ S_j, max over children
// D(J - w)), children being J minus one of its maximal elements (for the first
// ideal of a segment: the last ideal of the previous segment, which contains
// every earlier ideal). One test costs O(#ideals · width · k); a binary search
// on T (relative precision 1e-7) finds the optimum, parent pointers rebuild
// the split, and the largest T proven infeasible is a lower bound.
//
// DIRECT pair DP. The DIRECT charge of stage j = J \ I is
//   (W(J) - W(I))·slow_j + Σ recv + Σ send,
// recv over the tensors crossing cut I with a consumer in J \ I (bytes: the
// largest such edge), send over the tensors crossing cut J produced in J \ I
// (bytes: the largest edge leaving J), each transfer twice. Links: recv on the
// fastest link into d_j from an earlier stage's device, send on the fastest
// from d_j to a later one (0 when one shares d_j). With one link for every
// pair of distinct stage devices this is CostModel::Evaluate exactly; else a
// lower bound. Per ideal the crossing tensors (producer, edges leaving, largest
// bytes) are kept sorted by producer, built incrementally along the lattice,
// so a pair's charge is one merge of two short lists. Non-separable, so the
// DP is explicit: F_j(J) = min over I ⊊ J of max(F_{j-1}(I), charge_j(I, J)),
// pruned by the best known split's objective UB: only values < UB, only
// ideals J whose work the stages before and after can hold within UB, I
// scanned by decreasing work until the compute plus J's separable comm bound
// (below) reaches the best found for J, I skipped when F_{j-1}(I) or the
// pair's separable bound (compute + I's receive bound + J's send bound)
// already does. Clamps: with c <= the optimum, stopping J's scan once it
// reaches c leaves the optimum unchanged (the recursion then computes
// max(F_j, c)); c starts at the separable bound and rises to the least F at
// each finished cut (every chain crosses it). Rounds: a first round clamps
// at UB·(1 - 1e-3), where most scans stop at their first candidate; a
// result above the clamp is exact, else it lowers UB and the next round
// clamps 10x lower, down to the separable bound. The search grows forward,
// or backward (the mirror recursion from V) when that frontier is far
// smaller, and meets at one cut. Its optimum is the exact DIRECT optimum
// (memory ignored, uniform links, nothing glued) and a lower bound always;
// the chain is evaluated exactly. When stage links differ a second pass
// charges each stage the slowest of its possible links (an upper bound on
// CostModel::Evaluate, so its split is at least as good as its optimum);
// the note gives both optima. Past 50M pair charges or on ShouldStop it
// falls back to the separable bound below (noted in Partition::note).
//
// DIRECT separable bound. Computed before the pair DP (its clamp) and kept
// as the bound when the pair DP gives up. Pass 1 uses the RELAY charge (>= DIRECT per stage
// on uniform links) to find splits; every split found is evaluated exactly.
// Pass 2 uses a charge that no DIRECT split can beat and yields the bound:
//   - receive: J \ I contains a minimal element u of V \ I, and every
//     predecessor of u is in I, so stage j receives at least u's input
//     tensors: >= min_u (Σ_preds bytes)/bw + min_u (#preds)·lat, where bw /
//     lat are the fastest link from any earlier stage's device to d_j (0 if
//     an earlier stage shares d_j);
//   - send: J \ I contains a maximal element w of J; all of w's consumers are
//     in later stages, so stage j pays at least w's largest edge:
//     >= min_w bytes_w/bw + [every maximal w has a consumer]·lat, fastest
//     link from d_j to any later stage's device (0 if one shares d_j).
// Both depend on one end only, so the same DP applies; its optimum is <= the
// DIRECT optimum of every valid split, and so is its largest infeasible T.
//
// Free sources. A node with no inputs and one consumer (an input placeholder,
// a buffer, the labels), and recursively a node with one consumer fed only by
// such nodes (a causal-mask slice), is incomparable with almost everything
// and would multiply the ideals. Such nodes, up to 1e-3 of the total work, are
// glued to the first other node downstream: absent from the lattice, placed
// in that node's stage, their tensors never crossing a cut. Splits found this
// way are valid splits of the original graph. The bound stays valid up to
// the glued work: moving the free nodes of any split S into their target's
// stage raises no stage's cost by more than glued work x slowest slowdown
// (RELAY: fewer tensors cross each cut; DIRECT bound charge: checked stage by
// stage, a moved source is a minimal element that receives nothing), so the
// bound is the DP's minus that, and the move yields a glued split unless some
// stage of S held only free sources; such splits become chains with an empty
// stage whose other stages cost no more, so when anything is glued the bound
// search admits empty stages at charge 0.
//
// Memory. Stage memory = psf·params + inflight_j·activations is separable
// except for tied parameters; the DP charges a tied group once per node of
// the group in the stage (an upper bound), so every split it accepts fits.
// Memory is ignored first (which keeps the RELAY result exact and the bound
// valid); if that split does not fit, a second search adds the constraint
// m_j(I) >= m_j(J) - cap_j, checked for two candidates per J: the sub-ideal
// with the largest h and the one with the largest m. At T = ∞ the second
// candidate makes the test exact (for the upper-bound memory), so "no split
// at T = ∞" proves no split fits when no parameters are tied; for finite T the
// memory search is a heuristic (never an invalid or over-memory split).
// The lower bound always comes from the memory-free searches.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "direct_pair_dp.h"
#include "ideal_lattice.h"
#include "pipeplan/core/partition.h"
#include "pipeplan/core/status_macros.h"
#include "separable_dp.h"

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
  //    see "Free sources"). Then the pair DP.
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
  //    admitted bounds every split (see "Free sources"); its chains are not
  //    offered.
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
  // Gluing may add the glued work to a stage (see "Free sources").
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
    PIPEPLAN_ASSIGN_OR_RETURN(
        Lattice lat, BuildLattice(problem.graph(), problem.cost, LatticeLimits{}, &problem));
    return LatticeSolve(problem, lat).Run();
  }
};

}  // namespace
}  // namespace lattice_dp_internal

std::unique_ptr<Partitioner> MakeLatticeDpPartitioner() {
  return std::make_unique<lattice_dp_internal::LatticeDpPartitioner>();
}

}  // namespace pipeplan
