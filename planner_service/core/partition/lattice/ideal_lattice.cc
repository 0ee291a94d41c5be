#include "ideal_lattice.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "separators.h"

namespace pipeplan::lattice_dp_internal {
namespace {

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
// the first non-free node downstream; docs/partitioning.md, "Free sources".
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

// Per segment, the breadth-first enumeration of its ideals as bitmasks over
// the segment-local nodes.
template <int W>
struct SegmentBfs {
  std::vector<Mask<W>> pred, succ;          // in-segment neighbours per local node
  std::vector<Mask<W>> ideals;              // in BFS order (inclusion-compatible)
  absl::flat_hash_map<Mask<W>, int> index;  // mask -> global ideal id
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

  absl::StatusOr<Lattice> Build();

 private:
  absl::Status Stopped() const;
  absl::Status TooMany(const std::string& why) const;

  // Cuts the topological order (without the glued nodes) into segments at
  // the separators.
  void MakeSegments();
  // Cheap refusal first: nodes of equal depth inside a segment are pairwise
  // incomparable, so a layer of w nodes means at least 2^w ideals.
  absl::Status CheckWidths() const;

  // Adds the attributes of ideal `from` ∪ {u} (u maximal in it) to the back
  // of the arrays. `in_from` / `in_to` test membership before / after.
  template <typename InFrom, typename InTo>
  void PushExtension(int from, int u, InFrom in_from, InTo in_to);

  // Enumerates the ideals of segment si (W words per mask).
  template <int W>
  absl::Status Enumerate(int si);
  // The ideal X = ∅ of segment si: the previous segment's full ideal plus
  // this segment's separator.
  void PushBaseIdeal(int si);
  // The immediate sub-ideals of ideal (si, x) with global id `id` (CSR
  // child lists), and its send-side DIRECT bound attributes from its
  // maximal elements.
  template <int W>
  void PushChildren(int si, const SegmentBfs<W>& bfs, const Mask<W>& x, int id);
  // The ideals one node larger than (si, x) not seen yet, and the
  // receive-side DIRECT bound attributes of (si, x) from the minimal
  // elements of its complement.
  template <int W>
  absl::Status PushExtensions(int si, SegmentBfs<W>& bfs, const Mask<W>& x, int id);

  const Graph& g_;
  const CostModel* cost_;
  LatticeLimits limits_;
  const PartitionProblem* stop_;  // its ShouldStop ends the enumeration
  double glued_work_ = 0;
  std::vector<int> glue_;
  NodeData nd_;
  Lattice L_;
  std::vector<int> minimal_;  // scratch of PushExtensions
};

absl::StatusOr<Lattice> LatticeBuilder::Build() {
  L_.glue = glue_;
  L_.glued_work = glued_work_;
  MakeSegments();
  PIPEPLAN_RETURN_IF_ERROR(CheckWidths());
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

absl::Status LatticeBuilder::Stopped() const {
  const bool cancelled =
      stop_->cancelled != nullptr && stop_->cancelled->load(std::memory_order_relaxed);
  const std::string why =
      absl::StrCat("ideal_dp stopped while enumerating ideals (", L_.size(), " so far)");
  return cancelled ? absl::CancelledError(why) : absl::DeadlineExceededError(why);
}

absl::Status LatticeBuilder::TooMany(const std::string& why) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "graph has too many ideals for the ideal-lattice DP: ", why, "; limit ", limits_.max_ideals));
}

void LatticeBuilder::MakeSegments() {
  const int n = g_.num_nodes();
  std::vector<char> skip(n, 0);
  for (int v = 0; v < n; ++v) skip[v] = glue_[v] >= 0;
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
}

absl::Status LatticeBuilder::CheckWidths() const {
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
      return TooMany(absl::StrCat("at least 2^", widest, " ideals (", widest, " parallel nodes)"));
    }
  }
  return absl::OkStatus();
}

template <typename InFrom, typename InTo>
void LatticeBuilder::PushExtension(int from, int u, InFrom in_from, InTo in_to) {
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
absl::Status LatticeBuilder::Enumerate(int si) {
  Segment& s = L_.segs[si];
  const int sz = static_cast<int>(s.nodes.size());
  s.words = W;
  s.first = L_.size();
  SegmentBfs<W> bfs;
  bfs.pred.resize(sz);
  bfs.succ.resize(sz);
  for (int x = 0; x < sz; ++x) {
    for (int e : g_.in_edges(s.nodes[x])) {
      const int u = g_.edge(e).src;
      if (L_.seg_of_node[u] == si) {
        bfs.pred[x].Set(L_.local_of_node[u]);
        bfs.succ[L_.local_of_node[u]].Set(x);
      }
    }
  }
  PushBaseIdeal(si);
  bfs.ideals.push_back(Mask<W>{});
  bfs.index.emplace(Mask<W>{}, s.first);
  for (size_t q = 0; q < bfs.ideals.size(); ++q) {
    const Mask<W> x = bfs.ideals[q];
    const int id = s.first + static_cast<int>(q);
    PushChildren(si, bfs, x, id);
    PIPEPLAN_RETURN_IF_ERROR(PushExtensions(si, bfs, x, id));
  }
  s.count = static_cast<int>(bfs.ideals.size());
  s.masks.resize(static_cast<size_t>(s.count) * W);
  for (int q = 0; q < s.count; ++q) {
    std::memcpy(&s.masks[static_cast<size_t>(q) * W], bfs.ideals[q].w.data(), W * sizeof(uint64_t));
  }
  return absl::OkStatus();
}

void LatticeBuilder::PushBaseIdeal(int si) {
  if (si == 0) {
    for (auto* a : {&L_.work, &L_.params, &L_.acts, &L_.cut_bytes, &L_.cut_count}) {
      a->push_back(0);
    }
    return;
  }
  const Segment& s = L_.segs[si];
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

template <int W>
void LatticeBuilder::PushChildren(int si, const SegmentBfs<W>& bfs, const Mask<W>& x, int id) {
  const Segment& s = L_.segs[si];
  L_.child_begin.push_back(static_cast<int>(L_.child.size()));
  double ob = kInf, oc = 1;
  if (id == s.first) {
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
    for (int w = 0; w < static_cast<int>(s.nodes.size()); ++w) {
      if (!x.Has(w) || x.Meets(bfs.succ[w])) continue;
      Mask<W> y = x;
      y.Clear(w);
      L_.child.push_back(bfs.index.at(y));
      const int node = s.nodes[w];
      ob = std::min(ob, std::max(0.0, nd_.out_max[node]));
      if (nd_.out_max[node] < 0) oc = 0;
    }
  }
  L_.out_bytes.push_back(ob);
  L_.out_count.push_back(oc);
}

template <int W>
absl::Status LatticeBuilder::PushExtensions(int si, SegmentBfs<W>& bfs, const Mask<W>& x, int id) {
  const Segment& s = L_.segs[si];
  // Membership of node w in ideal (si, m).
  auto member = [&](const Mask<W>& m, int w) {
    if (g_.topo_position(w) <= s.sep_pos) return true;
    return L_.seg_of_node[w] == si && m.Has(L_.local_of_node[w]);
  };
  minimal_.clear();
  for (int u = 0; u < static_cast<int>(s.nodes.size()); ++u) {
    if (x.Has(u) || !x.Covers(bfs.pred[u])) continue;
    minimal_.push_back(s.nodes[u]);
    Mask<W> y = x;
    y.Set(u);
    if (bfs.index.contains(y)) continue;
    if (static_cast<int64_t>(bfs.ideals.size()) >= limits_.max_segment_ideals ||
        L_.size() >= limits_.max_ideals) {
      return TooMany(absl::StrCat("more than ", L_.size(), " enumerated"));
    }
    if (stop_ != nullptr && (L_.size() & 4095) == 0 && stop_->ShouldStop()) return Stopped();
    bfs.index.emplace(y, L_.size());
    bfs.ideals.push_back(y);
    PushExtension(
        id, s.nodes[u], [&](int w) { return member(x, w); }, [&](int w) { return member(y, w); });
  }
  // Past the last one: the next segment's separator.
  if (minimal_.empty() && si + 1 < static_cast<int>(L_.segs.size())) {
    minimal_.push_back(g_.topo_order()[L_.segs[si + 1].sep_pos]);
  }
  double ib = minimal_.empty() ? 0 : kInf, ic = minimal_.empty() ? 0 : kInf;
  for (int u : minimal_) {
    ib = std::min(ib, nd_.in_bytes[u]);
    ic = std::min(ic, nd_.in_count[u]);
  }
  L_.in_bytes.push_back(ib);
  L_.in_count.push_back(ic);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Lattice> BuildLattice(const Graph& g, const CostModel* cost,
                                     const LatticeLimits& limits, const PartitionProblem* stop) {
  return LatticeBuilder(g, cost, limits, stop).Build();
}

std::vector<int> StageOfNode(const Graph& g, const Lattice& lat, const std::vector<int>& chain) {
  std::vector<int> stage(g.num_nodes(), -1);
  // Ideal id -> (segment, mask); nodes of I_{j+1} get stage j, from the
  // top down so each node ends with the first stage that contains it.
  for (int j = static_cast<int>(chain.size()) - 2; j >= 0; --j) {
    const int id = chain[j + 1];
    int si =
        static_cast<int>(std::upper_bound(lat.segs.begin(), lat.segs.end(), id,
                                          [](int v, const Segment& s) { return v < s.first; }) -
                         lat.segs.begin()) -
        1;
    const Segment& s = lat.segs[si];
    for (int p = 0; p <= s.sep_pos; ++p) stage[g.topo_order()[p]] = j;
    const uint64_t* mask = &s.masks[static_cast<size_t>(id - s.first) * s.words];
    for (size_t x = 0; x < s.nodes.size(); ++x) {
      if ((mask[x >> 6] >> (x & 63)) & 1) stage[s.nodes[x]] = j;
    }
  }
  for (int v = 0; v < g.num_nodes(); ++v) {
    if (lat.glue[v] >= 0) stage[v] = stage[lat.glue[v]];
  }
  return stage;
}

absl::StatusOr<int64_t> CountIdeals(const Graph& g, const LatticeLimits& limits) {
  PIPEPLAN_ASSIGN_OR_RETURN(Lattice lat, BuildLattice(g, nullptr, limits));
  return lat.size();
}

}  // namespace pipeplan::lattice_dp_internal
