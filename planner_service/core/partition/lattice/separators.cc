#include "separators.h"

#include <algorithm>
#include <vector>

namespace pipeplan::lattice_dp_internal {

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

}  // namespace pipeplan::lattice_dp_internal
