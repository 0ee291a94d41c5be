#include "contraction.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

#include "union_find.h"

namespace pipeplan {
namespace {

bool KeepsCuts(const ContractionOptions& options, int n) {
  return options.keep_cuts.size() == static_cast<size_t>(n);
}

int CountRoots(UnionFind& uf) {
  int count = 0;
  for (int v = 0; v < static_cast<int>(uf.parent.size()); ++v) count += uf.Find(v) == v;
  return count;
}

// Step 1: free sources (exact for the bound, see contraction.h). Whether
// any was merged.
bool MergeFreeSources(const CostModel& cost, const ContractionOptions& options, UnionFind& uf) {
  const Graph& g = cost.graph();
  const int n = g.num_nodes();
  const bool keep = KeepsCuts(options, n);
  bool merged = false;
  for (int v = 0; v < n; ++v) {
    if (!g.in_edges(v).empty() || g.out_edges(v).empty()) continue;
    if (cost.work_ref(v) != 0 || cost.activation_bytes(v) != 0 || g.param_group(v) >= 0) continue;
    const int c = g.edge(g.out_edges(v)[0]).dst;
    bool single = true;
    for (int e : g.out_edges(v)) single &= g.edge(e).dst == c;
    if (!single) continue;
    if (keep && options.keep_cuts[v] != options.keep_cuts[c]) continue;
    uf.parent[uf.Find(v)] = uf.Find(c);
    merged = true;
  }
  return merged;
}

// A super-node edge A -> B and the bytes a cut there would move.
struct MergeCandidate {
  int a, b;
  double bytes;
};

// Current super-node edges with the bytes a cut there would move (the
// largest edge of each producer node, summed over producer nodes), and how
// many successors / predecessors each super-node has.
std::vector<MergeCandidate> SuperEdges(const CostModel& cost, UnionFind& uf,
                                       std::vector<int>& succ_count, std::vector<int>& pred_count) {
  const Graph& g = cost.graph();
  std::vector<std::tuple<int, int, int, double>> raw;  // (A, B, producer node, bytes)
  for (int e = 0; e < g.num_edges(); ++e) {
    const int a = uf.Find(g.edge(e).src), b = uf.Find(g.edge(e).dst);
    if (a != b) raw.emplace_back(a, b, g.edge(e).src, cost.edge_bytes(e));
  }
  std::sort(raw.begin(), raw.end());
  std::vector<MergeCandidate> cands;
  succ_count.assign(g.num_nodes(), 0);
  pred_count.assign(g.num_nodes(), 0);
  for (size_t i = 0; i < raw.size();) {
    const int a = std::get<0>(raw[i]), b = std::get<1>(raw[i]);
    double total = 0;
    size_t j = i;
    while (j < raw.size() && std::get<0>(raw[j]) == a && std::get<1>(raw[j]) == b) {
      // Same producer node: count its largest edge once.
      const int prod = std::get<2>(raw[j]);
      double largest = 0;
      while (j < raw.size() && std::get<0>(raw[j]) == a && std::get<1>(raw[j]) == b &&
             std::get<2>(raw[j]) == prod) {
        largest = std::max(largest, std::get<3>(raw[j]));
        ++j;
      }
      total += largest;
    }
    ++succ_count[a];
    ++pred_count[b];
    cands.push_back({a, b, total});
    i = j;
  }
  return cands;
}

// The edges that may merge (the contraction stays acyclic, the merged work
// stays under `cap`, the kept cuts stay), most expensive cut first.
std::vector<MergeCandidate> MergeableEdges(const CostModel& cost, const ContractionOptions& options,
                                           UnionFind& uf, const std::vector<double>& work,
                                           double cap) {
  std::vector<int> succ_count, pred_count;
  const std::vector<MergeCandidate> cands = SuperEdges(cost, uf, succ_count, pred_count);
  const bool keep = KeepsCuts(options, cost.graph().num_nodes());
  std::vector<MergeCandidate> ok;
  for (const MergeCandidate& c : cands) {
    if (succ_count[c.a] != 1 && pred_count[c.b] != 1) continue;
    if (work[c.a] + work[c.b] > cap) continue;
    if (keep && options.keep_cuts[c.a] != options.keep_cuts[c.b]) continue;
    ok.push_back(c);
  }
  std::sort(ok.begin(), ok.end(), [&](const MergeCandidate& x, const MergeCandidate& y) {
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    return work[x.a] + work[x.b] < work[y.a] + work[y.b];
  });
  return ok;
}

// Step 2: lossy edge merges in rounds of disjoint pairs, down to the
// target. Whether any edge was merged.
bool MergeEdges(const CostModel& cost, const ContractionOptions& options, UnionFind& uf) {
  const int n = cost.graph().num_nodes();
  int current = CountRoots(uf);
  std::vector<double> work(n);
  for (int v = 0; v < n; ++v) work[v] = cost.work_ref(v);
  for (int v = 0; v < n; ++v) {
    if (uf.Find(v) != v) work[uf.Find(v)] += work[v];
  }
  const double cap =
      options.max_super_work > 0 ? options.max_super_work : std::numeric_limits<double>::infinity();
  bool lossy = false;
  for (;;) {
    const std::vector<MergeCandidate> ok = MergeableEdges(cost, options, uf, work, cap);
    if (ok.empty()) break;
    std::vector<char> used(n, 0);
    int merged = 0;
    for (const MergeCandidate& c : ok) {
      if (current <= options.target_super_nodes) break;
      if (used[c.a] || used[c.b]) continue;
      used[c.a] = used[c.b] = 1;
      // Keep the root that carries the keep_cuts stage (any member works:
      // all members share it); root b absorbs a.
      uf.parent[c.a] = c.b;
      work[c.b] += work[c.a];
      --current;
      ++merged;
    }
    if (merged == 0) break;
    lossy = true;
    if (current <= options.target_super_nodes) break;
  }
  return lossy;
}

// Super-nodes numbered in topological order of their first member, with
// their sums and deduplicated edges.
Contraction Summarize(const CostModel& cost, UnionFind& uf) {
  const Graph& g = cost.graph();
  const int n = g.num_nodes();
  Contraction out;
  out.super_of_node.assign(n, -1);
  std::vector<int> id_of_root(n, -1);
  for (int v : g.topo_order()) {
    const int r = uf.Find(v);
    if (id_of_root[r] == -1) id_of_root[r] = out.num_super++;
    out.super_of_node[v] = id_of_root[r];
  }
  const int m = out.num_super;
  out.members.resize(m);
  out.work_ref.assign(m, 0);
  out.activation_bytes.assign(m, 0);
  out.param_groups.resize(m);
  for (int v : g.topo_order()) {
    const int s = out.super_of_node[v];
    out.members[s].push_back(v);
    out.work_ref[s] += cost.work_ref(v);
    out.activation_bytes[s] += cost.activation_bytes(v);
    if (g.param_group(v) >= 0) out.param_groups[s].push_back(g.param_group(v));
  }
  for (auto& groups : out.param_groups) {
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  }
  for (int e = 0; e < g.num_edges(); ++e) {
    const int a = out.super_of_node[g.edge(e).src], b = out.super_of_node[g.edge(e).dst];
    if (a != b) out.edges.emplace_back(a, b);
  }
  std::sort(out.edges.begin(), out.edges.end());
  out.edges.erase(std::unique(out.edges.begin(), out.edges.end()), out.edges.end());
  return out;
}

}  // namespace

std::vector<int> Contraction::Expand(std::span<const int> stage_of_super) const {
  std::vector<int> stage(super_of_node.size());
  for (size_t v = 0; v < super_of_node.size(); ++v) stage[v] = stage_of_super[super_of_node[v]];
  return stage;
}

bool Contraction::Restrict(std::span<const int> stage_of_node,
                           std::vector<int>* stage_of_super) const {
  if (stage_of_node.size() != super_of_node.size()) return false;
  stage_of_super->assign(num_super, -1);
  for (size_t v = 0; v < super_of_node.size(); ++v) {
    int& s = (*stage_of_super)[super_of_node[v]];
    if (s == -1) {
      s = stage_of_node[v];
    } else if (s != stage_of_node[v]) {
      return false;
    }
  }
  return true;
}

double FreeSourceFallbackBound(const PartitionProblem& problem) {
  const CostModel& cost = *problem.cost;
  const int k = problem.num_stages();
  if (k <= 1) return std::numeric_limits<double>::infinity();
  double total = 0, largest = 0;
  for (int v = 0; v < cost.graph().num_nodes(); ++v) {
    total += cost.work_ref(v);
    largest = std::max(largest, cost.work_ref(v));
  }
  double capacity = 0, smallest = std::numeric_limits<double>::infinity();
  double min_slowdown = std::numeric_limits<double>::infinity();
  for (int d : problem.stage_device) {
    capacity += 1 / cost.slowdown(d);
    smallest = std::min(smallest, 1 / cost.slowdown(d));
    min_slowdown = std::min(min_slowdown, cost.slowdown(d));
  }
  return std::max(total / (capacity - smallest), largest * min_slowdown);
}

Contraction Contract(const PartitionProblem& problem, const ContractionOptions& options) {
  const CostModel& cost = *problem.cost;
  const int n = cost.graph().num_nodes();
  UnionFind uf(n);
  const bool merged_free = options.merge_free_sources && MergeFreeSources(cost, options, uf);
  bool lossy = false;
  if (options.target_super_nodes > 0 && CountRoots(uf) > options.target_super_nodes) {
    lossy = MergeEdges(cost, options, uf);
  }
  Contraction out = Summarize(cost, uf);
  out.merged_free_sources = merged_free;
  out.lossy = lossy;
  return out;
}

}  // namespace pipeplan
