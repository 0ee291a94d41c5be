#include "zero_cost_merge.h"

#include <numeric>
#include <vector>

#include "partition/union_find.h"

namespace pipeplan {
namespace {

// No work, no parameters, at most a byte of activations (the exporter's
// "nothing"), no output without gradient (its charge would change).
bool CostsNothing(const CostModel& cost, int v) {
  const Graph& g = cost.graph();
  if (cost.work_ref(v) != 0 || g.param_group(v) >= 0 || g.activation_bytes(v) > 1) return false;
  return g.node(v).outputs_without_grad.empty();
}

// The one node (under `uf`) every edge of `edges` leads to through `end`, or
// -1; `largest` receives the largest of their bytes.
template <typename End>
int OnlyNeighbour(const Graph& g, std::span<const int> edges, UnionFind& uf, End end,
                  double& largest) {
  int only = -1;
  largest = 0;
  for (int e : edges) {
    const int n = uf.Find(end(g.edge(e)));
    if (only >= 0 && n != only) return -1;
    only = n;
    largest = std::max(largest, g.edge(e).bytes);
  }
  return only;
}

}  // namespace

std::optional<GroupedGraph> MergeZeroCostNodes(const CostModel& cost) {
  const Graph& g = cost.graph();
  UnionFind uf(g.num_nodes());
  bool merged = false;
  // Consumers first, so a run of such nodes folds into the node it feeds.
  const auto order = g.topo_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int v = *it;
    if (!CostsNothing(cost, v) || g.in_edges(v).empty()) continue;
    double in_bytes = 0, out_bytes = 0;
    const int producer = OnlyNeighbour(
        g, g.in_edges(v), uf, [](const Graph::Edge& e) { return e.src; }, in_bytes);
    int into = -1;
    if (g.out_edges(v).empty()) {
      into = producer;
    } else if (g.in_edges(v).size() == 1) {
      const int consumer = OnlyNeighbour(
          g, g.out_edges(v), uf, [](const Graph::Edge& e) { return e.dst; }, out_bytes);
      bool one_output = true;
      for (int e : g.out_edges(v))
        one_output &= g.edge(e).output == g.edge(g.out_edges(v)[0]).output;
      if (consumer >= 0 && one_output && out_bytes >= in_bytes) into = consumer;
    }
    if (into < 0) continue;
    uf.parent[uf.Find(v)] = uf.Find(into);
    merged = true;
  }
  if (!merged) return std::nullopt;
  std::vector<int> group(g.num_nodes()), dense(g.num_nodes(), -1);
  int groups = 0;
  for (int v = 0; v < g.num_nodes(); ++v) {
    const int root = uf.Find(v);
    if (dense[root] < 0) dense[root] = groups++;
    group[v] = dense[root];
  }
  absl::StatusOr<GroupedGraph> out = GroupNodes(g, std::move(group), cost.cluster().max_flops());
  // Merging into a neighbour never closes a cycle; a failure here is a bug,
  // and the lattice DP then simply runs on the graph as it is.
  if (!out.ok()) return std::nullopt;
  return *std::move(out);
}

}  // namespace pipeplan
