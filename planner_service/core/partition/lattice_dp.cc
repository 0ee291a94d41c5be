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
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lattice_dp_internal.h"
#include "pipeplan/core/partition.h"
#include "pipeplan/core/status_macros.h"

namespace pipeplan {
namespace lattice_dp_internal {

std::vector<char> FindSeparators(const Graph& g) { return FindSeparators(g, {}); }

std::vector<char> FindSeparators(const Graph& g, const std::vector<char>& skip) {
  // Over the topological order restricted to the nodes not skipped, v at
  // position p is comparable with every node iff it is the only sink of the
  // prefix [0, p] (then every earlier node reaches it: follow successors
  // inside the prefix until a sink) and the only source of the suffix
  // [p, n). Node u is a sink of prefix [0, p] for p in [pos(u), first
  // successor position - 1]; a source of suffix [p, n) for p in [last
  // predecessor position + 1, pos(u)]. Difference arrays count them.
  const int n = g.num_nodes();
  auto skipped = [&](int v) { return !skip.empty() && skip[v]; };
  std::vector<int> pos(n, -1), order;
  for (int v : g.topo_order()) {
    if (skipped(v)) continue;
    pos[v] = static_cast<int>(order.size());
    order.push_back(v);
  }
  const int m = static_cast<int>(order.size());
  std::vector<int> sinks(m + 1, 0), sources(m + 1, 0);
  for (int u : order) {
    const int p = pos[u];
    int first_succ = m;
    for (int e : g.out_edges(u)) {
      if (!skipped(g.edge(e).dst)) first_succ = std::min(first_succ, pos[g.edge(e).dst]);
    }
    ++sinks[p];
    --sinks[first_succ];
    int last_pred = -1;
    for (int e : g.in_edges(u)) {
      if (!skipped(g.edge(e).src)) last_pred = std::max(last_pred, pos[g.edge(e).src]);
    }
    ++sources[last_pred + 1];
    --sources[p + 1];
  }
  std::vector<char> sep(n, 0);
  int a = 0, b = 0;
  for (int p = 0; p < m; ++p) {
    a += sinks[p];
    b += sources[p];
    if (a == 1 && b == 1) sep[order[p]] = 1;
  }
  return sep;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Per-node quantities the lattice attributes are built from.
struct NodeData {
  std::vector<double> work, params, acts;
  std::vector<double> out_max;   // largest out-edge bytes; -1 without consumers
  std::vector<double> in_bytes;  // Σ over distinct producers of the largest edge
  std::vector<double> in_count;  // distinct producers
};

// Free nodes: one consumer, every input from a free node (so sources first:
// placeholders, buffers, labels, and the ops hanging off them, like a causal
// mask slice), with together at most 1e-3 of the total work. Each is glued to
// the first non-free node downstream; see "Free sources" at the top.
// `glued_work` receives their total reference work.
std::vector<int> FreeSourceConsumers(const Graph& g, const CostModel* cost, double* glued_work) {
  std::vector<int> glue(g.num_nodes(), -1);
  *glued_work = 0;
  if (cost == nullptr) return glue;
  double total = 0;
  for (int v = 0; v < g.num_nodes(); ++v) total += cost->work_ref(v);
  double budget = 1e-3 * total;
  for (int u : g.topo_order()) {
    if (g.out_edges(u).empty() || cost->work_ref(u) > budget) continue;
    bool free_inputs = true;
    for (int e : g.in_edges(u)) free_inputs &= glue[g.edge(e).src] >= 0;
    const int c = g.edge(g.out_edges(u)[0]).dst;
    bool one = true;
    for (int e : g.out_edges(u)) one &= g.edge(e).dst == c;
    if (free_inputs && one) {
      glue[u] = c;
      budget -= cost->work_ref(u);
      *glued_work += cost->work_ref(u);
    }
  }
  // Resolve chains of free nodes to their final consumer.
  auto order = g.topo_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int u = *it;
    if (glue[u] >= 0 && glue[glue[u]] >= 0) glue[u] = glue[glue[u]];
  }
  return glue;
}

NodeData MakeNodeData(const Graph& g, const CostModel* cost, const std::vector<int>& glue) {
  const int n = g.num_nodes();
  NodeData d;
  d.work.assign(n, 0);
  d.params.assign(n, 0);
  d.acts.assign(n, 0);
  d.out_max.assign(n, -1);
  d.in_bytes.assign(n, 0);
  d.in_count.assign(n, 0);
  auto bytes = [&](int e) { return cost ? cost->edge_bytes(e) : g.edge(e).bytes; };
  std::vector<std::pair<int, double>> by_src;
  for (int v = 0; v < n; ++v) {
    if (cost) {
      d.work[v] = cost->work_ref(v);
      d.acts[v] = cost->activation_bytes(v);
      // Tied groups are charged once per node: an upper bound.
      if (g.param_group(v) >= 0) d.params[v] = g.param_group_bytes(g.param_group(v));
    }
    for (int e : g.out_edges(v)) d.out_max[v] = std::max(d.out_max[v], bytes(e));
    by_src.clear();
    for (int e : g.in_edges(v)) {
      const int s = g.edge(e).src;
      if (glue[s] >= 0) continue;  // in the consumer's stage: never received
      auto it = std::find_if(by_src.begin(), by_src.end(), [&](auto& x) { return x.first == s; });
      if (it == by_src.end()) {
        by_src.emplace_back(s, bytes(e));
      } else {
        it->second = std::max(it->second, bytes(e));
      }
    }
    for (auto& [s, b] : by_src) d.in_bytes[v] += b;
    d.in_count[v] = static_cast<double>(by_src.size());
  }
  for (int u = 0; u < n; ++u) {
    if (glue[u] < 0) continue;
    d.work[glue[u]] += d.work[u];
    d.params[glue[u]] += d.params[u];
    d.acts[glue[u]] += d.acts[u];
  }
  return d;
}

struct Segment {
  int sep_pos = -1;        // topological position of the separator before it
  std::vector<int> nodes;  // segment-local index -> node
  int words = 0;           // 64-bit words per mask
  int first = 0;           // global index of its first ideal (X = ∅)
  int count = 0;
  std::vector<uint64_t> masks;  // count x words
};

// The ideals with everything the DP needs, in inclusion-compatible order.
struct Lattice {
  std::vector<Segment> segs;
  std::vector<int> seg_of_node, local_of_node;  // -1 for separators
  std::vector<int> glue;                        // consumer of a free source, else -1
  double glued_work = 0;                        // reference work of the glued nodes
  std::vector<int> child_begin, child;          // CSR of immediate sub-ideals
  std::vector<double> work, params, acts;
  std::vector<double> cut_bytes, cut_count;  // tensors crossing the cut (RELAY)
  std::vector<double> in_bytes, in_count;    // DIRECT bound: receive side
  std::vector<double> out_bytes, out_count;  // DIRECT bound: send side
  int size() const { return static_cast<int>(work.size()); }
};

template <int W>
struct Mask {
  std::array<uint64_t, W> w{};
  bool Has(int i) const { return (w[i >> 6] >> (i & 63)) & 1; }
  void Set(int i) { w[i >> 6] |= uint64_t{1} << (i & 63); }
  void Clear(int i) { w[i >> 6] &= ~(uint64_t{1} << (i & 63)); }
  bool Covers(const Mask& o) const {  // o ⊆ this
    for (int k = 0; k < W; ++k) {
      if (o.w[k] & ~w[k]) return false;
    }
    return true;
  }
  bool Meets(const Mask& o) const {
    for (int k = 0; k < W; ++k) {
      if (o.w[k] & w[k]) return true;
    }
    return false;
  }
  bool operator==(const Mask& o) const { return w == o.w; }
  template <typename H>
  friend H AbslHashValue(H h, const Mask& m) {
    return H::combine_contiguous(std::move(h), m.w.data(), W);
  }
};

class LatticeBuilder {
 public:
  LatticeBuilder(const Graph& g, const CostModel* cost, const LatticeLimits& limits,
                 const PartitionProblem* stop)
      : g_(g),
        cost_(cost),
        limits_(limits),
        stop_(stop),
        glue_(FreeSourceConsumers(g, cost, &glued_work_)),
        nd_(MakeNodeData(g, cost, glue_)) {}

  absl::StatusOr<Lattice> Build() {
    const int n = g_.num_nodes();
    std::vector<char> skip(n, 0);
    for (int v = 0; v < n; ++v) skip[v] = glue_[v] >= 0;
    L_.glue = glue_;
    L_.glued_work = glued_work_;
    const std::vector<char> sep = FindSeparators(g_, skip);
    L_.seg_of_node.assign(n, -1);
    L_.local_of_node.assign(n, -1);
    L_.segs.emplace_back();
    for (int p = 0; p < n; ++p) {
      const int v = g_.topo_order()[p];
      if (skip[v]) continue;
      if (sep[v]) {
        L_.segs.emplace_back();
        L_.segs.back().sep_pos = p;
      } else {
        Segment& s = L_.segs.back();
        L_.seg_of_node[v] = static_cast<int>(L_.segs.size()) - 1;
        L_.local_of_node[v] = static_cast<int>(s.nodes.size());
        s.nodes.push_back(v);
      }
    }
    // Cheap refusal first: nodes of equal depth inside a segment are pairwise
    // incomparable, so a layer of w nodes means at least 2^w ideals.
    for (size_t i = 0; i < L_.segs.size(); ++i) {
      const Segment& s = L_.segs[i];
      if (static_cast<int>(s.nodes.size()) > limits_.max_segment_nodes) {
        return TooMany(absl::StrCat("a segment of ", s.nodes.size(), " mutually entangled nodes"));
      }
      std::vector<int> depth(s.nodes.size(), 0), layer(s.nodes.size() + 1, 0);
      int widest = 0;
      for (size_t x = 0; x < s.nodes.size(); ++x) {
        for (int e : g_.in_edges(s.nodes[x])) {
          const int u = g_.edge(e).src;
          if (L_.seg_of_node[u] == static_cast<int>(i)) {
            depth[x] = std::max(depth[x], depth[L_.local_of_node[u]] + 1);
          }
        }
        widest = std::max(widest, ++layer[depth[x]]);
      }
      if (widest >= 63 || (int64_t{1} << widest) > limits_.max_segment_ideals ||
          (int64_t{1} << widest) > limits_.max_ideals) {
        return TooMany(
            absl::StrCat("at least 2^", widest, " ideals (", widest, " parallel nodes)"));
      }
    }
    for (size_t i = 0; i < L_.segs.size(); ++i) {
      const int words = std::max<int>(1, (static_cast<int>(L_.segs[i].nodes.size()) + 63) / 64);
      absl::Status s;
      if (words == 1) {
        s = Enumerate<1>(static_cast<int>(i));
      } else if (words == 2) {
        s = Enumerate<2>(static_cast<int>(i));
      } else if (words <= 4) {
        s = Enumerate<4>(static_cast<int>(i));
      } else {
        s = Enumerate<8>(static_cast<int>(i));
      }
      PIPEPLAN_RETURN_IF_ERROR(s);
    }
    L_.child_begin.push_back(static_cast<int>(L_.child.size()));
    return std::move(L_);
  }

 private:
  absl::Status Stopped() const {
    const bool cancelled =
        stop_->cancelled != nullptr && stop_->cancelled->load(std::memory_order_relaxed);
    const std::string why =
        absl::StrCat("ideal_dp stopped while enumerating ideals (", L_.size(), " so far)");
    return cancelled ? absl::CancelledError(why) : absl::DeadlineExceededError(why);
  }

  absl::Status TooMany(const std::string& why) const {
    return absl::ResourceExhaustedError(
        absl::StrCat("graph has too many ideals for the ideal-lattice DP: ", why, "; limit ",
                     limits_.max_ideals));
  }

  // Adds the attributes of ideal `from` ∪ {u} (u maximal in it) to the back
  // of the arrays. `in_from` / `in_to` test membership before / after.
  template <typename InFrom, typename InTo>
  void PushExtension(int from, int u, InFrom in_from, InTo in_to) {
    double cb = L_.cut_bytes[from], cc = L_.cut_count[from];
    if (nd_.out_max[u] >= 0) {
      cb += nd_.out_max[u];
      cc += 1;
    }
    for (int e : g_.in_edges(u)) {
      const int v = g_.edge(e).src;
      if (glue_[v] >= 0) continue;  // its tensor never leaves u's stage
      bool dup = false;             // handle each producer once
      for (int f : g_.in_edges(u)) {
        if (f == e) break;
        if (g_.edge(f).src == v) dup = true;
      }
      if (dup) continue;
      double before = -1, after = -1;
      for (int f : g_.out_edges(v)) {
        const int w = g_.edge(f).dst;
        const double b = cost_ ? cost_->edge_bytes(f) : g_.edge(f).bytes;
        if (!in_from(w)) before = std::max(before, b);
        if (!in_to(w)) after = std::max(after, b);
      }
      // `before` >= 0: u was outside. The tensor leaves the cut if nothing
      // outside consumes it any more.
      cb += (after < 0 ? 0 : after) - before;
      if (after < 0) cc -= 1;
    }
    if (cc <= 0.5) cb = 0;
    L_.cut_bytes.push_back(std::max(0.0, cb));
    L_.cut_count.push_back(cc);
    L_.work.push_back(L_.work[from] + nd_.work[u]);
    L_.params.push_back(L_.params[from] + nd_.params[u]);
    L_.acts.push_back(L_.acts[from] + nd_.acts[u]);
  }

  template <int W>
  absl::Status Enumerate(int si) {
    Segment& s = L_.segs[si];
    const int sz = static_cast<int>(s.nodes.size());
    s.words = W;
    s.first = L_.size();
    std::vector<Mask<W>> pred(sz), succ(sz);
    for (int x = 0; x < sz; ++x) {
      for (int e : g_.in_edges(s.nodes[x])) {
        const int u = g_.edge(e).src;
        if (L_.seg_of_node[u] == si) {
          pred[x].Set(L_.local_of_node[u]);
          succ[L_.local_of_node[u]].Set(x);
        }
      }
    }
    std::vector<Mask<W>> ideals;
    absl::flat_hash_map<Mask<W>, int> index;
    const int next_sep =
        si + 1 < static_cast<int>(L_.segs.size()) ? g_.topo_order()[L_.segs[si + 1].sep_pos] : -1;
    // Membership of node w in ideal (si, m).
    auto member = [&](const Mask<W>& m, int w) {
      if (g_.topo_position(w) <= s.sep_pos) return true;
      return L_.seg_of_node[w] == si && m.Has(L_.local_of_node[w]);
    };
    // The ideal X = ∅: the previous segment's full ideal plus this separator.
    if (si == 0) {
      for (auto* a : {&L_.work, &L_.params, &L_.acts, &L_.cut_bytes, &L_.cut_count}) {
        a->push_back(0);
      }
    } else {
      const Segment& prev = L_.segs[si - 1];
      const int sep_node = g_.topo_order()[s.sep_pos];
      const int prev_pos = prev.sep_pos;
      const int pi = si - 1;
      auto in_prev_full = [&](int w) {
        return g_.topo_position(w) <= prev_pos || L_.seg_of_node[w] == pi;
      };
      auto in_base = [&](int w) { return g_.topo_position(w) <= s.sep_pos; };
      PushExtension(s.first - 1, sep_node, in_prev_full, in_base);
    }
    ideals.push_back(Mask<W>{});
    index.emplace(Mask<W>{}, s.first);
    std::vector<int> minimal;
    for (size_t q = 0; q < ideals.size(); ++q) {
      const Mask<W> x = ideals[q];
      const int id = s.first + static_cast<int>(q);
      // Immediate sub-ideals and maximal elements.
      L_.child_begin.push_back(static_cast<int>(L_.child.size()));
      double ob = kInf, oc = 1;
      if (q == 0) {
        if (si > 0) {
          L_.child.push_back(id - 1);
          const int sep_node = g_.topo_order()[s.sep_pos];
          ob = std::max(0.0, nd_.out_max[sep_node]);
          oc = nd_.out_max[sep_node] >= 0 ? 1 : 0;
        } else {
          ob = 0;
          oc = 0;
        }
      } else {
        for (int w = 0; w < sz; ++w) {
          if (!x.Has(w) || x.Meets(succ[w])) continue;
          Mask<W> y = x;
          y.Clear(w);
          L_.child.push_back(index.at(y));
          const int node = s.nodes[w];
          ob = std::min(ob, std::max(0.0, nd_.out_max[node]));
          if (nd_.out_max[node] < 0) oc = 0;
        }
      }
      L_.out_bytes.push_back(ob);
      L_.out_count.push_back(oc);
      // Extensions: the minimal elements of the complement in the segment.
      minimal.clear();
      for (int u = 0; u < sz; ++u) {
        if (x.Has(u) || !x.Covers(pred[u])) continue;
        minimal.push_back(s.nodes[u]);
        Mask<W> y = x;
        y.Set(u);
        if (index.contains(y)) continue;
        if (static_cast<int64_t>(ideals.size()) >= limits_.max_segment_ideals ||
            L_.size() >= limits_.max_ideals) {
          return TooMany(absl::StrCat("more than ", L_.size(), " enumerated"));
        }
        if (stop_ != nullptr && (L_.size() & 4095) == 0 && stop_->ShouldStop()) {
          return Stopped();
        }
        index.emplace(y, L_.size());
        ideals.push_back(y);
        PushExtension(
            id, s.nodes[u], [&](int w) { return member(x, w); },
            [&](int w) { return member(y, w); });
      }
      if (minimal.empty() && next_sep >= 0) minimal.push_back(next_sep);
      double ib = minimal.empty() ? 0 : kInf, ic = minimal.empty() ? 0 : kInf;
      for (int u : minimal) {
        ib = std::min(ib, nd_.in_bytes[u]);
        ic = std::min(ic, nd_.in_count[u]);
      }
      L_.in_bytes.push_back(ib);
      L_.in_count.push_back(ic);
    }
    s.count = static_cast<int>(ideals.size());
    s.masks.resize(static_cast<size_t>(s.count) * W);
    for (int q = 0; q < s.count; ++q) {
      std::memcpy(&s.masks[static_cast<size_t>(q) * W], ideals[q].w.data(), W * sizeof(uint64_t));
    }
    return absl::OkStatus();
  }

  const Graph& g_;
  const CostModel* cost_;
  LatticeLimits limits_;
  const PartitionProblem* stop_;  // its ShouldStop ends the enumeration
  double glued_work_ = 0;
  std::vector<int> glue_;
  NodeData nd_;
  Lattice L_;
};

absl::StatusOr<Lattice> BuildLattice(const Graph& g, const CostModel* cost,
                                     const LatticeLimits& limits,
                                     const PartitionProblem* stop = nullptr) {
  return LatticeBuilder(g, cost, limits, stop).Build();
}

// Separable charges of one stage j: h(I) = W(I)·slow - (lb·LB(I) + lc·LC(I)),
// g(J) = W(J)·slow + rb·RB(J) + rc·RC(J), memory m(I) = psf·P(I) + inflight·A(I).
struct StageCoef {
  double slow = 1;
  double lb = 0, lc = 0, rb = 0, rc = 0;
  double psf = 0, inflight = 0, cap = kInf;
};

enum class Charge { kRelay, kDirectLower };

// Links the DIRECT pair DP charges (see DirectDp::MakeLinks).
enum class LinkMode { kFastest, kWorst };

// Budgets of the DIRECT pair DP: pair evaluations and crossing-list entries.
constexpr int64_t kMaxPairs = 50'000'000;
constexpr int64_t kMaxCrossingEntries = 32'000'000;

class LatticeDp {
 public:
  LatticeDp(const PartitionProblem& p, const Lattice& lat) : p_(p), L_(lat) {
    const int N = L_.size();
    const int k = p_.num_stages();
    cur_.assign(N, 0);
    nxt_.assign(N, 0);
    dh_.assign(N, -kInf);
    dm_.assign(N, -kInf);
    ah_.assign(N, -1);
    am_.assign(N, -1);
    parent_.assign(static_cast<size_t>(N) * k, -1);
    coef_.resize(k);
  }

  void SetCharge(Charge charge) {
    const int k = p_.num_stages();
    const CostModel& cost = *p_.cost;
    const Cluster& cl = cost.cluster();
    const auto& dev = p_.stage_device;
    charge_ = charge;
    for (int j = 0; j < k; ++j) {
      StageCoef& c = coef_[j];
      c = StageCoef{};
      c.slow = cost.slowdown(dev[j]);
      c.psf = cost.param_state_factor();
      c.inflight = j < static_cast<int>(p_.stage_inflight.size()) ? p_.stage_inflight[j] : 1;
      c.cap = StageMemoryCap(p_, j) * (1 + 1e-12);
      if (charge == Charge::kRelay) {
        if (j > 0 && dev[j - 1] != dev[j]) {
          c.lb = 2 / cl.bandwidth(dev[j - 1], dev[j]);
          c.lc = 2 * cl.latency(dev[j - 1], dev[j]);
        }
        if (j + 1 < k && dev[j + 1] != dev[j]) {
          c.rb = 2 / cl.bandwidth(dev[j], dev[j + 1]);
          c.rc = 2 * cl.latency(dev[j], dev[j + 1]);
        }
      } else {
        // Fastest link from any earlier (to any later) stage's device; free
        // when one of them shares this device.
        auto fastest = [&](int from, int to, bool incoming, double* cb, double* cc) {
          double bw = 0, lat = kInf;
          for (int a = from; a < to; ++a) {
            if (dev[a] == dev[j]) return;
            const int s = incoming ? dev[a] : dev[j], t = incoming ? dev[j] : dev[a];
            bw = std::max(bw, cl.bandwidth(s, t));
            lat = std::min(lat, cl.latency(s, t));
          }
          if (from < to) {
            *cb = 2 / bw;
            *cc = 2 * lat;
          }
        };
        fastest(0, j, true, &c.lb, &c.lc);
        fastest(j + 1, k, false, &c.rb, &c.rc);
      }
    }
  }

  // Lets a stage be empty at charge 0 (bound searches only).
  void set_allow_empty(bool allow) { allow_empty_ = allow; }
  bool allow_empty() const { return allow_empty_; }

  // Whether a chain of ideals with every stage charge <= T exists (and, with
  // kMem, every stage within the upper-bound memory). Fills parent_.
  template <bool kMem>
  bool Feasible(double T) {
    const int N = L_.size();
    const int k = p_.num_stages();
    const bool relay = charge_ == Charge::kRelay;
    const double* W = L_.work.data();
    const double* LB = relay ? L_.cut_bytes.data() : L_.in_bytes.data();
    const double* LC = relay ? L_.cut_count.data() : L_.in_count.data();
    const double* RB = relay ? L_.cut_bytes.data() : L_.out_bytes.data();
    const double* RC = relay ? L_.cut_count.data() : L_.out_count.data();
    const double* P = L_.params.data();
    const double* A = L_.acts.data();
    const int* cb = L_.child_begin.data();
    const int* ch = L_.child.data();
    std::fill(cur_.begin(), cur_.end(), 0);
    cur_[0] = 1;
    for (int j = 0; j < k; ++j) {
      const StageCoef c = coef_[j];
      auto h = [&](int id) { return W[id] * c.slow - (c.lb * LB[id] + c.lc * LC[id]); };
      auto g = [&](int id) { return W[id] * c.slow + c.rb * RB[id] + c.rc * RC[id]; };
      auto m = [&](int id) { return c.psf * P[id] + c.inflight * A[id]; };
      int* parent = &parent_[static_cast<size_t>(j) * N];
      explored_ += N;
      // Accept J given the best-h candidate (bh, ah) and best-m one (bm, am).
      auto accept = [&](int id, double bh, int ah, double bm, int am) {
        if (ah < 0) return -1;
        const double need = g(id) - T;
        if constexpr (!kMem) {
          return bh >= need ? ah : -1;
        } else {
          const double mneed = m(id) - c.cap;
          if (bh >= need && m(ah) >= mneed) return ah;
          if (bm >= mneed && h(am) >= need) return am;
          return -1;
        }
      };
      if (j == k - 1) {  // only J = V matters
        double bh = -kInf, bm = -kInf;
        int ah = -1, am = -1;
        for (int id = 0; id < N - 1; ++id) {
          if (!cur_[id]) continue;
          if (const double v = h(id); v > bh) bh = v, ah = id;
          if constexpr (kMem) {
            if (const double v = m(id); v > bm) bm = v, am = id;
          }
        }
        parent[N - 1] = accept(N - 1, bh, ah, bm, am);
        if (allow_empty_ && cur_[N - 1]) parent[N - 1] = N - 1;
        return parent[N - 1] >= 0;
      }
      bool any = false;
      for (int id = 0; id < N; ++id) {
        double bh = -kInf, bm = -kInf;
        int ah = -1, am = -1;
        for (int q = cb[id]; q < cb[id + 1]; ++q) {
          const int x = ch[q];
          if (dh_[x] > bh) bh = dh_[x], ah = ah_[x];
          if constexpr (kMem) {
            if (dm_[x] > bm) bm = dm_[x], am = am_[x];
          }
        }
        int par = accept(id, bh, ah, bm, am);
        if (par < 0 && allow_empty_ && cur_[id]) par = id;
        parent[id] = par;
        nxt_[id] = par >= 0;
        any |= par >= 0;
        if (cur_[id]) {
          if (const double v = h(id); v > bh) bh = v, ah = id;
          if constexpr (kMem) {
            if (const double v = m(id); v > bm) bm = v, am = id;
          }
        }
        dh_[id] = bh;
        ah_[id] = ah;
        if constexpr (kMem) {
          dm_[id] = bm;
          am_[id] = am;
        }
      }
      if (!any) return false;
      cur_.swap(nxt_);
    }
    return false;  // unreachable: the last stage returns
  }

  bool Feasible(double T, bool memory) { return memory ? Feasible<true>(T) : Feasible<false>(T); }

  // The chain I_0..I_k of the last successful Feasible call.
  std::vector<int> Chain() const {
    const int N = L_.size();
    const int k = p_.num_stages();
    std::vector<int> chain(k + 1);
    chain[k] = N - 1;
    for (int j = k - 1; j >= 0; --j) {
      chain[j] = parent_[static_cast<size_t>(j) * N + chain[j + 1]];
    }
    return chain;
  }

  // The largest stage charge of a chain.
  double ChainCharge(const std::vector<int>& chain) const {
    const bool relay = charge_ == Charge::kRelay;
    double worst = 0;
    for (int j = 0; j + 1 < static_cast<int>(chain.size()); ++j) {
      const StageCoef& c = coef_[j];
      const int i = chain[j], J = chain[j + 1];
      const double left = relay ? c.lb * L_.cut_bytes[i] + c.lc * L_.cut_count[i]
                                : c.lb * L_.in_bytes[i] + c.lc * L_.in_count[i];
      const double right = relay ? c.rb * L_.cut_bytes[J] + c.rc * L_.cut_count[J]
                                 : c.rb * L_.out_bytes[J] + c.rc * L_.out_count[J];
      worst = std::max(worst, (L_.work[J] - L_.work[i]) * c.slow + left + right);
    }
    return worst;
  }

  std::vector<int> StageOfNode(const std::vector<int>& chain) const {
    const Graph& g = p_.graph();
    std::vector<int> stage(g.num_nodes(), -1);
    // Ideal id -> (segment, mask); nodes of I_{j+1} get stage j, from the
    // top down so each node ends with the first stage that contains it.
    for (int j = static_cast<int>(chain.size()) - 2; j >= 0; --j) {
      const int id = chain[j + 1];
      int si =
          static_cast<int>(std::upper_bound(L_.segs.begin(), L_.segs.end(), id,
                                            [](int v, const Segment& s) { return v < s.first; }) -
                           L_.segs.begin()) -
          1;
      const Segment& s = L_.segs[si];
      for (int p = 0; p <= s.sep_pos; ++p) stage[g.topo_order()[p]] = j;
      const uint64_t* mask = &s.masks[static_cast<size_t>(id - s.first) * s.words];
      for (size_t x = 0; x < s.nodes.size(); ++x) {
        if ((mask[x >> 6] >> (x & 63)) & 1) stage[s.nodes[x]] = j;
      }
    }
    for (int v = 0; v < g.num_nodes(); ++v) {
      if (L_.glue[v] >= 0) stage[v] = stage[L_.glue[v]];
    }
    return stage;
  }

  int64_t explored() const { return explored_; }

 private:
  const PartitionProblem& p_;
  const Lattice& L_;
  Charge charge_ = Charge::kRelay;
  bool allow_empty_ = false;
  std::vector<StageCoef> coef_;
  std::vector<char> cur_, nxt_;
  std::vector<double> dh_, dm_;
  std::vector<int> ah_, am_;
  std::vector<int> parent_;
  int64_t explored_ = 0;
};

// Exact DIRECT pair DP (see "DIRECT pair DP" at the top).
//
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
  DirectDp(const PartitionProblem& p, const Lattice& lat) : p_(p), L_(lat), g_(p.graph()) {}

  // Ideal id -> segment; node membership; crossing lists. False when the
  // lists would exceed `max_entries`.
  bool BuildCrossing(int64_t max_entries) {
    const int N = L_.size();
    const int n = g_.num_nodes();
    seg_of_ideal_.assign(N, 0);
    for (size_t s = 0; s < L_.segs.size(); ++s) {
      const Segment& seg = L_.segs[s];
      for (int q = 0; q < seg.count; ++q) seg_of_ideal_[seg.first + q] = static_cast<int>(s);
    }
    uniform_.assign(n, 1);
    for (int v = 0; v < n; ++v) {
      auto out = g_.out_edges(v);
      for (int e : out) uniform_[v] &= p_.cost->edge_bytes(e) == p_.cost->edge_bytes(out[0]);
    }
    std::vector<int> stamp(n, -1);
    C_.begin.assign(1, 0);
    C_.begin.reserve(N + 1);
    C_.begin.push_back(0);  // ideal 0 = ∅ crosses nothing
    for (int id = 1; id < N; ++id) {
      const int s = seg_of_ideal_[id];
      const Segment& seg = L_.segs[s];
      const int q = id - seg.first;
      int child, u;
      if (q == 0) {
        child = id - 1;
        u = g_.topo_order()[seg.sep_pos];
      } else {
        child = L_.child[L_.child_begin[id]];
        const uint64_t* a = Mask(id);
        const uint64_t* b = Mask(child);
        u = -1;
        for (int w = 0; w < seg.words && u < 0; ++w) {
          if (const uint64_t d = a[w] ^ b[w]) u = seg.nodes[w * 64 + __builtin_ctzll(d)];
        }
      }
      for (int e : g_.in_edges(u)) stamp[g_.edge(e).src] = id;
      bool u_done = g_.out_edges(u).empty();
      auto push_u = [&] {
        double b = 0;
        for (int e : g_.out_edges(u)) b = std::max(b, p_.cost->edge_bytes(e));
        C_.node.push_back(u);
        C_.count.push_back(static_cast<int>(g_.out_edges(u).size()));
        C_.bytes.push_back(b);
        u_done = true;
      };
      for (int64_t x = C_.begin[child]; x < C_.begin[child + 1]; ++x) {
        const int v = C_.node[x];
        if (!u_done && u < v) push_u();
        if (stamp[v] != id) {
          C_.node.push_back(v);
          C_.count.push_back(C_.count[x]);
          C_.bytes.push_back(C_.bytes[x]);
          continue;
        }
        int cnt = 0;
        double b = 0;
        for (int e : g_.out_edges(v)) {
          if (Member(id, g_.edge(e).dst)) continue;
          ++cnt;
          b = std::max(b, p_.cost->edge_bytes(e));
        }
        if (cnt > 0) {
          C_.node.push_back(v);
          C_.count.push_back(cnt);
          C_.bytes.push_back(b);
        }
      }
      if (!u_done) push_u();
      C_.begin.push_back(static_cast<int64_t>(C_.node.size()));
      if (static_cast<int64_t>(C_.node.size()) > max_entries) return false;
    }
    return true;
  }

  // Whether every pair of distinct stages talks over the same link and no two
  // stages share a device: then the pair charge is CostModel::Evaluate's.
  bool UniformLinks() const {
    const auto& dev = p_.stage_device;
    const Cluster& cl = p_.cost->cluster();
    const int k = p_.num_stages();
    for (int a = 0; a < k; ++a) {
      for (int b = a + 1; b < k; ++b) {
        if (dev[a] == dev[b]) return false;
        if (cl.bandwidth(dev[a], dev[b]) != cl.bandwidth(dev[0], dev[std::min(1, k - 1)]) ||
            cl.latency(dev[a], dev[b]) != cl.latency(dev[0], dev[std::min(1, k - 1)])) {
          return false;
        }
      }
    }
    return true;
  }

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
  // pair charges of this object in all.
  //
  // Clamped rounds. A round with clamp c stops a stage's scan for J as soon
  // as it reaches c; by induction it computes F'_j = max(F_j, c) exactly,
  // and every value it stores is a real chain's. So a round whose best chain
  // is above c has found the exact minimum, and one whose best chain is at
  // or below c has found a chain that lowers the limit of the next round.
  // Clamps start just below the limit (most stages then stop at the first
  // candidate that is good enough) and fall to `lo`, where a round is exact.
  Result Run(double limit, double lo, bool allow_empty, int64_t max_pairs,
             LinkMode mode = LinkMode::kFastest) {
    const std::vector<StageLinks> links = MakeLinks(mode);
    Result best;
    double L = limit;
    for (double frac = 1e-3;; frac *= 10) {
      const double clamp = prune_ ? std::max(lo, L * (1 - frac)) : 0;
      const bool last = frac >= 1 || clamp <= lo || !prune_;
      Result d = allow_empty ? Run<true>(links, L, clamp, max_pairs)
                             : Run<false>(links, L, clamp, max_pairs);
      ++rounds_;
      if (!d.complete) {
        best.stopped = d.stopped;
        return best;  // incomplete; best.chain may still be a good split
      }
      if (!d.chain.empty() && d.value < best.value) {
        best.value = d.value;
        best.chain = std::move(d.chain);
      }
      const bool exact = d.value > clamp && (!allow_empty || d.bound > clamp);
      if (exact || last) {
        best.complete = true;
        // Nothing below L: L bounds the minimum (L < limit only after a chain
        // of value L was found; otherwise the caller's split bounds it).
        const double none = L < limit ? L : kInf;
        best.bound = allow_empty ? (d.bound < kInf ? d.bound : none)
                                 : (best.value < kInf ? best.value : none);
        return best;
      }
      if (d.value < kInf) L = std::min(L, d.value);
    }
  }

  int64_t pairs() const { return pairs_; }
  int rounds() const { return rounds_; }
  // Tests only: off, one unclamped round without the separable skips.
  void set_prune(bool prune) { prune_ = prune; }

 private:
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
  std::vector<StageLinks> MakeLinks(LinkMode mode) const {
    const auto& dev = p_.stage_device;
    const Cluster& cl = p_.cost->cluster();
    const int k = p_.num_stages();
    std::vector<StageLinks> out(k);
    for (int j = 0; j < k; ++j) {
      StageLinks& s = out[j];
      s.slow = p_.cost->slowdown(dev[j]);
      auto add = [](std::vector<Link>& v, Link l) {
        for (const Link& x : v) {
          if (x.a == l.a && x.b == l.b) return;
        }
        v.push_back(l);
      };
      for (int a = 0; a < k; ++a) {
        if (a == j) continue;
        const bool in = a < j;
        if (dev[a] == dev[j]) {
          (in ? s.recv_free : s.send_free) = true;
          continue;
        }
        const int from = in ? dev[a] : dev[j], to = in ? dev[j] : dev[a];
        add(in ? s.recv : s.send, {2 / cl.bandwidth(from, to), 2 * cl.latency(from, to)});
      }
      for (auto [free, v, lb] : {std::tuple(&s.recv_free, &s.recv, &s.recv_lb),
                                 std::tuple(&s.send_free, &s.send, &s.send_lb)}) {
        if (mode == LinkMode::kWorst) {
          *free = v->empty();
          if (!v->empty()) {
            Link w{0, 0};
            for (const Link& l : *v) w.a = std::max(w.a, l.a), w.b = std::max(w.b, l.b);
            v->assign(1, w);
          }
        } else if (*free) {
          v->clear();
        }
        *lb = Link{0, 0};
        if (!*free && !v->empty()) {
          *lb = Link{kInf, kInf};
          for (const Link& l : *v) lb->a = std::min(lb->a, l.a), lb->b = std::min(lb->b, l.b);
        }
      }
    }
    return out;
  }

  // Separable lower bounds on a stage's receive side (depends on I only)
  // and send side (J only); see "DIRECT separable fallback" at the top.
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
  double Comm(const StageLinks& s, int I, int J) const {
    int64_t x = C_.begin[I];
    const int64_t xe = C_.begin[I + 1];
    int64_t y = C_.begin[J];
    const int64_t ye = C_.begin[J + 1];
    double recv_bytes_cost = 0;
    const bool do_recv = !s.recv_free && !s.recv.empty();
    const bool do_send = !s.send_free && !s.send.empty();
    while (x < xe || y < ye) {
      const int vx = x < xe ? C_.node[x] : INT32_MAX;
      const int vy = y < ye ? C_.node[y] : INT32_MAX;
      if (vx < vy) {  // every remaining consumer of vx is in J \ I
        if (do_recv) recv_bytes_cost += Charge(s.recv, C_.bytes[x]);
        ++x;
      } else if (vy < vx) {  // produced in J \ I, consumed beyond J
        if (do_send) recv_bytes_cost += Charge(s.send, C_.bytes[y]);
        ++y;
      } else {
        if (do_recv && C_.count[x] > C_.count[y]) {
          double b = C_.bytes[x];
          if (C_.bytes[y] >= b && !uniform_[vx]) {
            b = 0;
            for (int e : g_.out_edges(vx)) {
              const int w = g_.edge(e).dst;
              if (Member(J, w) && !Member(I, w)) b = std::max(b, p_.cost->edge_bytes(e));
            }
          }
          recv_bytes_cost += Charge(s.recv, b);
        }
        ++x;
        ++y;
      }
    }
    return recv_bytes_cost;
  }

  // One side of the bidirectional search: per ideal the best value of the
  // stages it covers (F: every stage non-empty; G: empty stages allowed),
  // the alive ideals in work order, and the parent links of each stage.
  struct Side {
    std::vector<double> F, G, F2, G2;
    std::vector<int> alive, next;
    std::vector<std::vector<std::pair<int, int>>> parent;  // per stage, sorted by ideal
    int64_t Frontier() const { return static_cast<int64_t>(alive.size()); }
  };

  template <bool kEmpty>
  Result Run(const std::vector<StageLinks>& links, double limit, double clamp, int64_t max_pairs) {
    Result r;
    const int N = L_.size();
    const int k = p_.num_stages();
    const double thr = limit * (1 + 1e-9);
    const double* W = L_.work.data();
    const double total = W[N - 1];
    const double slack = 1e-9 * total;
    std::vector<int> by_work(N);
    for (int i = 0; i < N; ++i) by_work[i] = i;
    std::stable_sort(by_work.begin(), by_work.end(), [&](int a, int b) { return W[a] < W[b]; });
    std::vector<double> sorted_w(N);
    for (int i = 0; i < N; ++i) sorted_w[i] = W[by_work[i]];
    // Work the stages up to j / after j can hold within thr: the ideal
    // between stage j and j + 1 has its work in [lo_w[j], hi_w[j]].
    std::vector<double> lo_w(k), hi_w(k);
    {
      double acc = 0;
      for (int j = 0; j < k; ++j) hi_w[j] = (acc += thr / links[j].slow) + slack;
      acc = 0;
      for (int j = k - 1; j >= 0; --j) {
        lo_w[j] = total - acc - slack;
        acc += thr / links[j].slow;
      }
    }
    auto range = [&](int j) {  // by_work indices of the ideals ending stage j
      const int a = static_cast<int>(std::lower_bound(sorted_w.begin(), sorted_w.end(), lo_w[j]) -
                                     sorted_w.begin());
      const int b = static_cast<int>(std::upper_bound(sorted_w.begin(), sorted_w.end(), hi_w[j]) -
                                     sorted_w.begin());
      return std::pair<int, int>(a, b);
    };
    Side fw, bw;
    for (Side* s : {&fw, &bw}) {
      s->F.assign(N, kInf);
      s->G.assign(N, kInf);
      s->F2.assign(N, kInf);
      s->G2.assign(N, kInf);
      s->parent.resize(k);
    }
    fw.alive = {0};
    fw.F[0] = fw.G[0] = 0;
    bw.alive = {N - 1};
    bw.F[N - 1] = bw.G[N - 1] = 0;
    // fw covers stages 0..a (a = -1: nothing yet), bw covers b..k-1.
    int a = -1, b = k;
    // Clamps of F and G: `clamp`, raised to the least value at any cut.
    double clamp_f = clamp, clamp_g = clamp;
    int64_t since_check = 0;
    std::vector<double> alive_w;

    // Extends `side` by stage j. Forward: new ideals J end stage j, the old
    // ones I start it; backward: new ideals I start stage j, old ones J end
    // it. Candidates: forward, the ideals that can end stage j; backward, the
    // ones that can end stage j - 1 (or ∅ for j = 0).
    auto step = [&](Side& s, int j, bool forward) -> bool {
      const StageLinks& st = links[j];
      alive_w.resize(s.alive.size());
      for (size_t x = 0; x < s.alive.size(); ++x) alive_w[x] = W[s.alive[x]];
      s.next.clear();
      auto process = [&](int X) {
        double bestF = thr, bestG = thr;
        int arg = -1;
        if constexpr (kEmpty) bestG = std::min(bestG, s.G[X]);
        const double wx = W[X];
        const int na = static_cast<int>(s.alive.size());
        int q, end, dir;
        if (forward) {
          q = static_cast<int>(std::upper_bound(alive_w.begin(), alive_w.end(), wx + slack) -
                               alive_w.begin()) -
              1;
          end = -1;
          dir = -1;
        } else {
          q = static_cast<int>(std::lower_bound(alive_w.begin(), alive_w.end(), wx - slack) -
                               alive_w.begin());
          end = na;
          dir = 1;
        }
        const int start = q;
        // The fixed end's separable comm bound holds for every pair.
        const double lb_x = !prune_ ? 0 : forward ? SendLowerBound(st, X) : RecvLowerBound(st, X);
        for (; q != end; q += dir) {
          const double compute =
              std::max((forward ? wx - alive_w[q] : alive_w[q] - wx) * st.slow, 0.0);
          if (compute + lb_x >= (kEmpty ? std::max(bestF, bestG) : bestF)) break;
          const int Y = s.alive[q];
          if (!(s.F[Y] < bestF) && !(kEmpty && s.G[Y] < bestG)) continue;
          const double est = compute + lb_x +
                             (!prune_   ? 0
                              : forward ? RecvLowerBound(st, Y)
                                        : SendLowerBound(st, Y));
          const bool tryF = std::max(s.F[Y], est) < bestF;
          const bool tryG = kEmpty && std::max(s.G[Y], est) < bestG;
          if (!tryF && !tryG) continue;
          const int I = forward ? Y : X, J = forward ? X : Y;
          if (I == J || !Subset(I, J)) continue;
          ++pairs_;
          const double c = compute + Comm(st, I, J);
          if (tryF) {
            const double v = std::max(s.F[Y], c);
            if (v < bestF) bestF = v, arg = Y;
          }
          if constexpr (kEmpty) {
            const double v = std::max(s.G[Y], c);
            if (v < bestG) bestG = v;
          }
          // Nothing below the clamp exists: the first chain reaching it will do.
          if (bestF <= clamp_f && (!kEmpty || bestG <= clamp_g)) break;
        }
        since_check += std::abs(q - start) + 1;
        if (arg >= 0) {
          s.F2[X] = bestF;
          s.parent[j].push_back({X, arg});
        }
        if constexpr (kEmpty) {
          if (bestG < thr) s.G2[X] = bestG;
        }
        return arg >= 0 || (kEmpty && bestG < thr);
      };
      int lo, hi;
      if (forward) {
        std::tie(lo, hi) = j == k - 1 ? std::pair<int, int>(-1, -1) : range(j);
      } else {
        std::tie(lo, hi) = j == 0 ? std::pair<int, int>(-1, -1) : range(j - 1);
      }
      if (lo < 0) {
        const int X = forward ? N - 1 : 0;
        if (process(X)) s.next.push_back(X);
      } else {
        for (int idx = lo; idx < hi; ++idx) {
          const int X = by_work[idx];
          if (process(X)) s.next.push_back(X);
          if (since_check > (1 << 18)) {
            since_check = 0;
            if (p_.ShouldStop()) {
              r.stopped = true;
              return false;
            }
          }
          if (pairs_ > max_pairs) return false;
        }
      }
      for (int Y : s.alive) s.F[Y] = s.G[Y] = kInf;
      // Every chain below the limit passes through one of s.next, so their
      // smallest values bound its value: later scans may stop there.
      double min_f = kInf, min_g = kInf;
      for (int X : s.next) {
        s.F[X] = s.F2[X];
        s.G[X] = kEmpty ? s.G2[X] : s.F2[X];
        s.F2[X] = s.G2[X] = kInf;
        min_f = std::min(min_f, s.F[X]);
        min_g = std::min(min_g, s.G[X]);
      }
      if (prune_) {
        clamp_f = std::max(clamp_f, min_f);
        clamp_g = std::max(clamp_g, min_g);
      }
      s.alive.swap(s.next);
      std::sort(s.parent[j].begin(), s.parent[j].end());
      return true;
    };

    while (a + 1 < b) {
      // Grow forward unless the backward frontier is much smaller (a costly
      // tail prunes the backward search early).
      const bool forward = bw.Frontier() * 8 > fw.Frontier();
      if (!step(forward ? fw : bw, forward ? a + 1 : b - 1, forward)) return r;
      forward ? ++a : --b;
      if ((forward ? fw : bw).alive.empty()) break;
    }
    r.complete = true;
    // Meet: the ideal between stage a and stage b = a + 1.
    int meet = -1;
    if (a + 1 == b) {
      double best_bound = kInf;
      for (int X : fw.alive) {
        if (bw.F[X] < kInf && fw.F[X] < kInf) {
          const double v = std::max(fw.F[X], bw.F[X]);
          if (v < r.value) r.value = v, meet = X;
        }
        if constexpr (kEmpty) {
          best_bound = std::min(best_bound, std::max(fw.G[X], bw.G[X]));
        }
      }
      r.bound = kEmpty ? std::min(best_bound, r.value) : r.value;
    }
    if (meet >= 0) {
      auto find = [](const std::vector<std::pair<int, int>>& v, int x) {
        return std::lower_bound(v.begin(), v.end(), std::pair<int, int>{x, INT32_MIN})->second;
      };
      r.chain.assign(k + 1, 0);
      r.chain[a + 1] = meet;
      for (int j = a; j >= 0; --j) r.chain[j] = find(fw.parent[j], r.chain[j + 1]);
      for (int j = b; j < k; ++j) r.chain[j + 1] = find(bw.parent[j], r.chain[j]);
    }
    return r;
  }

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

// The best split seen: fitting memory first, then the smallest objective.
struct Incumbent {
  std::optional<Partition> best;
  double min_objective = kInf;  // over every split offered, fitting or not
  absl::Status Offer(const PartitionProblem& problem, std::vector<int> stage_of_node) {
    PIPEPLAN_ASSIGN_OR_RETURN(Partition p, MakePartition(problem, std::move(stage_of_node)));
    min_objective = std::min(min_objective, p.objective);
    if (!best || (p.fits_memory && !best->fits_memory) ||
        (p.fits_memory == best->fits_memory && p.objective < best->objective)) {
      best = std::move(p);
    }
    return absl::OkStatus();
  }
};

struct SearchResult {
  bool feasible = false;  // some chain passed the test
  double lower = 0;       // largest T shown infeasible (memory-free searches)
  bool stopped = false;
};

// Binary search on T for the current charge; every feasible chain is
// evaluated exactly and offered to the incumbent.
absl::StatusOr<SearchResult> Search(const PartitionProblem& problem, LatticeDp& dp, bool memory,
                                    double floor, Incumbent& inc) {
  SearchResult r;
  if (!dp.Feasible(kInf, memory)) return r;
  r.feasible = true;
  std::vector<int> chain = dp.Chain();
  if (!dp.allow_empty()) PIPEPLAN_RETURN_IF_ERROR(inc.Offer(problem, dp.StageOfNode(chain)));
  double hi = dp.ChainCharge(chain);
  // Every stage charge is at least its compute, so `floor` (a compute-only
  // bound) is below the optimum; a hair lower is infeasible.
  double lo = std::min(floor * (1 - 1e-9), hi * (1 - 1e-9));
  for (int it = 0; it < 200 && hi - lo > 1e-7 * hi; ++it) {
    if (problem.ShouldStop()) {
      r.stopped = true;
      break;
    }
    const double mid = lo + (hi - lo) / 2;
    if (dp.Feasible(mid, memory)) {
      chain = dp.Chain();
      hi = std::min(mid, dp.ChainCharge(chain));
      if (!dp.allow_empty()) PIPEPLAN_RETURN_IF_ERROR(inc.Offer(problem, dp.StageOfNode(chain)));
    } else {
      lo = mid;
    }
  }
  r.lower = lo;
  return r;
}

class LatticeDpPartitioner : public Partitioner {
 public:
  std::string_view name() const override { return "ideal_dp"; }

  absl::StatusOr<Partition> Solve(const PartitionProblem& problem) const override {
    const Graph& g = problem.graph();
    const int k = problem.num_stages();
    PIPEPLAN_RETURN_IF_ERROR(ValidateProblem(problem));
    PIPEPLAN_ASSIGN_OR_RETURN(Lattice lat,
                              BuildLattice(g, problem.cost, LatticeLimits{}, &problem));
    LatticeDp dp(problem, lat);
    Incumbent inc;
    const bool relay = problem.cost->options().comm_model == CommModel::kRelay;
    const double floor = BalanceLowerBound(problem);
    double dp_lower = 0;
    const bool glued = std::any_of(lat.glue.begin(), lat.glue.end(), [](int c) { return c >= 0; });
    std::string note;

    // 1. Memory-free search with the RELAY charge: exact for RELAY (its
    //    infeasible T bounds every split), an upper-bound charge for DIRECT.
    dp.SetCharge(Charge::kRelay);
    PIPEPLAN_ASSIGN_OR_RETURN(SearchResult a, Search(problem, dp, false, floor, inc));
    bool stopped = a.stopped;
    if (relay && !a.stopped && !glued) dp_lower = a.lower;

    // 2. DIRECT: first the separable lower-bound charge (memory ignored): its
    //    largest infeasible T bounds every split and clamps the pair DP; its
    //    chains are valid splits (not offered when empty stages are admitted,
    //    see "Free sources"). Then the pair DP with the fastest links (memory
    //    ignored), pruned by the best objective so far: its optimum bounds
    //    every split (minus the glued work) and its chain is evaluated
    //    exactly. With links that differ between stage pairs a second pair DP
    //    charges every stage its slowest links (an upper bound) for a split
    //    that is good under the real links.
    bool direct_done = false, direct_exact = false;
    int64_t direct_pairs = 0;
    std::string direct_note;
    if (!relay && !stopped) {
      if (!problem.warm_start.empty() &&
          static_cast<int>(problem.warm_start.size()) == g.num_nodes()) {
        // A caller's split that is not valid is ignored.
        (void)inc.Offer(problem,
                        std::vector<int>(problem.warm_start.begin(), problem.warm_start.end()));
      }
      dp.SetCharge(Charge::kDirectLower);
      dp.set_allow_empty(glued);
      PIPEPLAN_ASSIGN_OR_RETURN(SearchResult c, Search(problem, dp, false, floor, inc));
      dp.set_allow_empty(false);
      stopped |= c.stopped;
      double clamp = 0;
      if (!c.stopped) dp_lower = clamp = c.lower;
      if (!stopped && inc.min_objective < kInf) {
        DirectDp direct(problem, lat);
        if (!direct.BuildCrossing(kMaxCrossingEntries)) {
          direct_note = "; crossing lists over budget, separable DIRECT bound";
        } else {
          DirectDp::Result d = direct.Run(inc.min_objective, clamp, glued, kMaxPairs);
          stopped |= d.stopped;
          if (!d.chain.empty()) {
            PIPEPLAN_RETURN_IF_ERROR(inc.Offer(problem, dp.StageOfNode(d.chain)));
          }
          if (d.complete) {
            direct_done = true;
            const bool uniform = direct.UniformLinks();
            direct_exact = uniform && !glued;
            // Nothing at or below a known split's value can only be rounding;
            // that split's value then bounds every split.
            dp_lower = std::max(dp_lower, d.bound < kInf ? d.bound : inc.min_objective);
            if (!uniform && !stopped && inc.min_objective > dp_lower * (1 + problem.relative_gap)) {
              const int64_t before = direct.pairs();
              // Its optimum is at least the fastest-link one (d.value).
              const double worst_clamp = d.value < kInf ? d.value * (1 - 1e-9) : clamp;
              DirectDp::Result w = direct.Run(inc.min_objective, worst_clamp, false,
                                              kMaxPairs + before, LinkMode::kWorst);
              stopped |= w.stopped;
              if (!w.chain.empty()) {
                PIPEPLAN_RETURN_IF_ERROR(inc.Offer(problem, dp.StageOfNode(w.chain)));
              }
              auto ms = [](double v) {
                return v < kInf ? absl::StrCat(v * 1e3, " ms") : std::string("none below");
              };
              direct_note = absl::StrCat("; stage links differ: fastest-link pass ", ms(d.value),
                                         " (the bound), slowest-link pass ",
                                         w.complete ? ms(w.value) : std::string("incomplete"),
                                         ", best split ", ms(inc.min_objective));
            }
          } else if (!d.stopped) {
            direct_note = absl::StrCat("; pair DP over budget (", direct.pairs(),
                                       " pairs), separable DIRECT bound");
          }
        }
        direct_pairs = direct.pairs();
      }
    }

    // 3. If the best split does not fit, search again under the memory caps.
    bool memory_proven_infeasible = false;
    if (inc.best && !inc.best->fits_memory && !stopped) {
      PIPEPLAN_ASSIGN_OR_RETURN(SearchResult b, Search(problem, dp, true, floor, inc));
      stopped |= b.stopped;
      if (!b.feasible) {
        bool tied = false;
        std::vector<int> seen(g.num_param_groups(), 0);
        for (int v = 0; v < g.num_nodes(); ++v) {
          if (g.param_group(v) >= 0 && seen[g.param_group(v)]++) tied = true;
        }
        memory_proven_infeasible = !tied;
      }
    }

    // 4. RELAY with glued sources: the RELAY charge with empty stages admitted
    //    bounds every split (see "Free sources"); its chains are not offered.
    if (relay && glued && !stopped) {
      dp.SetCharge(Charge::kRelay);
      dp.set_allow_empty(true);
      PIPEPLAN_ASSIGN_OR_RETURN(SearchResult c, Search(problem, dp, false, floor, inc));
      dp.set_allow_empty(false);
      if (!c.stopped) dp_lower = c.lower;
      stopped |= c.stopped;
    }

    if (!inc.best) {
      return absl::InternalError("ideal_dp found no chain of ideals");  // k <= n rules this out
    }
    if (memory_proven_infeasible) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the model does not fit in memory on any split into ", k,
          " stages; add devices or stages, lower microbatches in flight, or use a smaller "
          "optimizer state"));
    }
    // Gluing may add the glued work to a stage (see "Free sources").
    double max_slow = 0;
    for (int d : problem.stage_device) max_slow = std::max(max_slow, problem.cost->slowdown(d));
    const double lower = std::max(floor, dp_lower - lat.glued_work * max_slow);
    Partition result = std::move(*inc.best);
    // Guard against rounding in the DP's prefix sums.
    result.lower_bound = std::min(lower * (1 - 1e-9), result.objective);
    result.nodes_explored = dp.explored() + direct_pairs;
    const char* kind = relay          ? "exact (RELAY)"
                       : direct_exact ? "exact (DIRECT, pair DP)"
                       : direct_done  ? "bounded (DIRECT, pair DP)"
                                      : "bounded (DIRECT, separable)";
    result.note = absl::StrCat(kind, ", ", lat.size(), " ideals in ", lat.segs.size(), " segments",
                               direct_note, stopped ? "; stopped early" : "",
                               result.fits_memory ? "" : "; no split within memory found");
    return result;
  }
};

}  // namespace

absl::StatusOr<PairDpResult> DirectPairOptimum(const PartitionProblem& problem, bool prune,
                                               bool slowest_links) {
  PIPEPLAN_ASSIGN_OR_RETURN(Lattice lat,
                            BuildLattice(problem.graph(), problem.cost, LatticeLimits{}, &problem));
  DirectDp direct(problem, lat);
  if (!direct.BuildCrossing(kMaxCrossingEntries)) {
    return absl::ResourceExhaustedError("crossing lists over budget");
  }
  direct.set_prune(prune);
  const bool glued = std::any_of(lat.glue.begin(), lat.glue.end(), [](int c) { return c >= 0; });
  DirectDp::Result d =
      direct.Run(kInf, 0, glued, kMaxPairs, slowest_links ? LinkMode::kWorst : LinkMode::kFastest);
  if (!d.complete) return absl::ResourceExhaustedError("pair DP incomplete");
  PairDpResult out;
  out.value = d.value;
  out.bound = d.bound;
  out.pairs = direct.pairs();
  if (!d.chain.empty()) {
    LatticeDp dp(problem, lat);
    out.stage_of_node = dp.StageOfNode(d.chain);
  }
  return out;
}

absl::StatusOr<int64_t> CountIdeals(const Graph& g, const LatticeLimits& limits) {
  PIPEPLAN_ASSIGN_OR_RETURN(Lattice lat, BuildLattice(g, nullptr, limits));
  return lat.size();
}

}  // namespace lattice_dp_internal

std::unique_ptr<Partitioner> MakeLatticeDpPartitioner() {
  return std::make_unique<lattice_dp_internal::LatticeDpPartitioner>();
}

}  // namespace pipeplan
