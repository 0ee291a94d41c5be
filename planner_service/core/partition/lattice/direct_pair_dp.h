// The DIRECT pair DP over the ideal lattice: DIRECT communication depends on
// both ends of a stage, so the DP is explicit over pairs of ideals
// F_j(J) = min over I ⊊ J of max(F_{j-1}(I), charge_j(I, J)), pruned by a
// known split's objective, run as clamped rounds and grown from both ends.
// Exact with uniform links; a lower bound with the fastest links and an upper
// bound with the slowest otherwise. The derivation: docs/partitioning.md,
// "DIRECT pair DP". Internal to pipeplan_core; tests include it directly.
#ifndef PIPEPLAN_CORE_PARTITION_DIRECT_PAIR_DP_H_
#define PIPEPLAN_CORE_PARTITION_DIRECT_PAIR_DP_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ideal_lattice.h"
#include "pipeplan/core/partition.h"

namespace pipeplan::lattice_dp_internal {

// Links the DIRECT pair DP charges (see DirectDp::MakeLinks).
enum class LinkMode { kFastest, kWorst };

// Budgets of the DIRECT pair DP: pair evaluations and crossing-list entries.
inline constexpr int64_t kMaxPairs = 50'000'000;
inline constexpr int64_t kMaxCrossingEntries = 32'000'000;

// Per ideal X the tensors crossing its cut: producers v ∈ X (not glued) with
// an out-edge leaving X, sorted by node, each with the number of such edges
// and the largest of their bytes. Built incrementally along the lattice:
// X = Y ∪ {u} with Y an immediate sub-ideal, and only u's producers change.
struct Crossing {
  std::vector<int64_t> begin;  // CSR over ideals
  std::vector<int> node, count;
  std::vector<double> bytes;
};

class DirectDp {
 public:
  // REQUIRES: `p` and `lat` outlive this object.
  DirectDp(const PartitionProblem& p, const Lattice& lat) : p_(p), L_(lat), g_(p.graph()) {}

  // Ideal id -> segment; node membership; crossing lists. False when the
  // lists would exceed `max_entries`.
  bool BuildCrossing(int64_t max_entries);

  // Whether every pair of distinct stages talks over the same link and no two
  // stages share a device: then the pair charge is CostModel::Evaluate's.
  bool UniformLinks() const;

  struct Result {
    bool complete = false;  // false: stopped or over the pair budget
    bool stopped = false;
    double value = kInf;     // best chain, every stage non-empty
    double bound = kInf;     // best chain, empty stages allowed when `allow_empty`
    std::vector<int> chain;  // ideals I_0..I_k of `value`
  };

  // min over chains of the largest pair charge under `mode`'s links,
  // searching only values <= `limit` (a known split's objective); `lo` is a
  // lower bound on that minimum. `allow_empty` also tracks chains with empty
  // stages (for the bound when free sources are glued); `max_pairs` caps the
  // pair charges of this object in all. Runs clamped rounds, the clamp
  // falling from just below the limit to `lo` (docs/partitioning.md,
  // "DIRECT pair DP").
  Result Run(double limit, double lo, bool allow_empty, int64_t max_pairs,
             LinkMode mode = LinkMode::kFastest);

  int64_t pairs() const { return pairs_; }
  int rounds() const { return rounds_; }
  // Tests only: off, one unclamped round without the separable skips.
  void set_prune(bool prune) { prune_ = prune; }

 private:
  // BuildCrossing's parts: ideal -> segment and uniform out-edges; the
  // child ideal `id` extends and the node it adds; `id`'s crossing list,
  // the child's updated for that node (`stamp`: scratch per node).
  void IndexSegments();
  std::pair<int, int> ChildAndAddedNode(int id) const;
  void AppendCrossing(int id, int child, int u, std::vector<int>& stamp);

  struct Link {
    double a, b;  // seconds = a·bytes + b, both directions of the transfer
  };
  struct StageLinks {
    double slow = 1;
    bool recv_free = false, send_free = false;
    std::vector<Link> recv, send;  // charged: the cheapest of them per tensor
    // Per tensor at least a·bytes + b: for the separable lower bounds that
    // skip a pair before merging its lists.
    Link recv_lb{0, 0}, send_lb{0, 0};
  };

  static double Charge(const std::vector<Link>& links, double bytes) {
    double best = kInf;
    for (const Link& l : links) best = std::min(best, l.a * bytes + l.b);
    return best;
  }

  // Links of every stage. kFastest: per tensor the fastest link from (to)
  // any earlier (later) stage's device, free when one shares the device: a
  // lower bound on CostModel::Evaluate, exact with uniform links. kWorst:
  // the slowest bandwidth and latency over those devices (0 only when every
  // one of them shares the device): an upper bound.
  std::vector<StageLinks> MakeLinks(LinkMode mode) const;

  // Separable lower bounds on a stage's receive side (depends on I only)
  // and send side (J only); docs/partitioning.md, "DIRECT separable bound".
  double RecvLowerBound(const StageLinks& s, int I) const {
    return s.recv_lb.a * L_.in_bytes[I] + s.recv_lb.b * L_.in_count[I];
  }
  double SendLowerBound(const StageLinks& s, int J) const {
    return s.send_lb.a * L_.out_bytes[J] + s.send_lb.b * L_.out_count[J];
  }

  const uint64_t* Mask(int id) const {
    const Segment& s = L_.segs[seg_of_ideal_[id]];
    return &s.masks[static_cast<size_t>(id - s.first) * s.words];
  }

  bool Member(int id, int w) const {
    if (L_.glue[w] >= 0) w = L_.glue[w];
    const int s = seg_of_ideal_[id];
    if (g_.topo_position(w) <= L_.segs[s].sep_pos) return true;
    if (L_.seg_of_node[w] != s) return false;
    const int x = L_.local_of_node[w];
    return (Mask(id)[x >> 6] >> (x & 63)) & 1;
  }

  // I ⊆ J.
  bool Subset(int i, int J) const {
    const int si = seg_of_ideal_[i], sj = seg_of_ideal_[J];
    if (si != sj) return si < sj;
    const uint64_t* a = Mask(i);
    const uint64_t* b = Mask(J);
    for (int w = 0; w < L_.segs[si].words; ++w) {
      if (a[w] & ~b[w]) return false;
    }
    return true;
  }

  // Communication of stage J \ I: tensors crossing cut I with a consumer in
  // J \ I are received (bytes: the largest such edge), tensors crossing cut J
  // produced outside I are sent (bytes: the largest edge leaving J).
  double Comm(const StageLinks& s, int I, int J) const;

  // One side of the bidirectional search: per ideal the best value of the
  // stages it covers (F: every stage non-empty; G: empty stages allowed),
  // the alive ideals in work order, and the parent links of each stage.
  struct Side {
    std::vector<double> F, G, F2, G2;
    std::vector<int> alive, next;
    std::vector<std::vector<std::pair<int, int>>> parent;  // per stage, sorted by ideal
    int64_t Frontier() const { return static_cast<int64_t>(alive.size()); }
  };

  // One clamped round of Run, defined in the .cc.
  template <bool kEmpty>
  class Round;

  const PartitionProblem& p_;
  const Lattice& L_;
  const Graph& g_;
  std::vector<int> seg_of_ideal_;
  std::vector<char> uniform_;
  Crossing C_;
  int64_t pairs_ = 0;
  int rounds_ = 0;
  bool prune_ = true;
};

// The DIRECT pair DP alone, memory ignored, no limit: its optimum over
// chains with every stage non-empty (`value`, infinity when none), over
// chains that may leave stages empty when free sources are glued (`bound`),
// the split of `value` and the pair charges it merged. Links: the fastest
// (a lower bound) or the slowest (an upper bound) per stage. `prune` off
// turns off the clamped rounds and the separable skips (for tests).
struct PairDpResult {
  double value = 0, bound = 0;
  std::vector<int> stage_of_node;
  int64_t pairs = 0;
};
absl::StatusOr<PairDpResult> DirectPairOptimum(const PartitionProblem& problem, bool prune,
                                               bool slowest_links);

}  // namespace pipeplan::lattice_dp_internal

#endif  // PIPEPLAN_CORE_PARTITION_DIRECT_PAIR_DP_H_
