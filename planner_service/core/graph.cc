#include "pipeplan/core/graph.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pipeplan {
namespace {

absl::Status CheckNumber(double x, absl::string_view field, bool allow_zero = true) {
  if (!std::isfinite(x)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is not a finite number"));
  }
  if (x < 0 || (!allow_zero && x == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be non-negative, got ", x));
  }
  return absl::OkStatus();
}

absl::Status CheckNode(const NodeSpec& n, size_t i) {
  const std::string where = absl::StrCat("graph.nodes[", i, "]");
  if (n.id.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ".id is empty"));
  const std::pair<double, const char*> fields[] = {
      {n.forward_flops, "forward_flops"}, {n.backward_flops, "backward_flops"},
      {n.param_bytes, "param_bytes"},     {n.activation_bytes, "activation_bytes"},
      {n.output_bytes, "output_bytes"},   {n.weight_grad_fraction, "weight_grad_fraction"}};
  for (const auto& [value, name] : fields) {
    if (auto s = CheckNumber(value, absl::StrCat(where, ".", name, " (\"", n.id, "\")")); !s.ok()) {
      return s;
    }
  }
  if (n.weight_grad_fraction > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".weight_grad_fraction must be in [0, 1], got ", n.weight_grad_fraction));
  }
  if (n.forward_seconds) {
    if (auto s = CheckNumber(*n.forward_seconds, absl::StrCat(where, ".forward_seconds"));
        !s.ok()) {
      return s;
    }
  }
  if (n.backward_seconds) {
    if (auto s = CheckNumber(*n.backward_seconds, absl::StrCat(where, ".backward_seconds"));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// Names the nodes of one cycle. `placed` marks nodes the topological sort
// ordered; every unplaced node has an unplaced successor, so a walk along
// unplaced successors must revisit a node, and the walk from it is a cycle.
std::string DescribeCycle(const Graph& g, const std::vector<char>& placed) {
  const int n = g.num_nodes();
  int v = 0;
  while (placed[v]) ++v;
  std::vector<int> seen_at(n, -1);
  std::vector<int> walk;
  while (seen_at[v] < 0) {
    seen_at[v] = static_cast<int>(walk.size());
    walk.push_back(v);
    for (int e : g.out_edges(v)) {
      if (!placed[g.edge(e).dst]) {
        v = g.edge(e).dst;
        break;
      }
    }
  }
  std::vector<std::string> names;
  for (size_t i = seen_at[v]; i < walk.size(); ++i) names.push_back(g.node(walk[i]).id);
  names.push_back(names.front());
  return absl::StrJoin(names, " -> ");
}

}  // namespace

double Graph::backward_flops(int v) const {
  const NodeSpec& n = nodes_[v];
  return n.backward_flops > 0 ? n.backward_flops : 2 * n.forward_flops;
}

double Graph::activation_bytes(int v) const {
  const NodeSpec& n = nodes_[v];
  return n.activation_bytes > 0 ? n.activation_bytes : n.output_bytes;
}

double Graph::weight_grad_fraction(int v) const {
  const NodeSpec& n = nodes_[v];
  return n.weight_grad_fraction > 0 ? n.weight_grad_fraction : 0.5;
}

std::optional<int> Graph::FindNode(absl::string_view id) const {
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<Graph> Graph::Build(GraphSpec spec, const GraphLimits& limits) {
  if (spec.nodes.empty()) return absl::InvalidArgumentError("graph.nodes is empty");
  if (spec.nodes.size() > limits.max_nodes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "graph.nodes has ", spec.nodes.size(), " nodes, over the limit of ", limits.max_nodes));
  }
  if (spec.edges.size() > limits.max_edges) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "graph.edges has ", spec.edges.size(), " edges, over the limit of ", limits.max_edges));
  }
  if (auto s = CheckNumber(spec.batch_size, "graph.batch_size"); !s.ok()) return s;

  Graph g;
  g.name_ = std::move(spec.name);
  g.batch_size_ = spec.batch_size;
  g.index_.reserve(spec.nodes.size());
  for (size_t i = 0; i < spec.nodes.size(); ++i) {
    if (auto s = CheckNode(spec.nodes[i], i); !s.ok()) return s;
    auto [it, inserted] = g.index_.emplace(spec.nodes[i].id, static_cast<int>(i));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("graph.nodes[", i, "].id \"", spec.nodes[i].id,
                                                     "\" is duplicated (first at graph.nodes[",
                                                     it->second, "])"));
    }
  }
  g.nodes_ = std::move(spec.nodes);
  const int n = g.num_nodes();

  g.edges_.reserve(spec.edges.size());
  for (size_t i = 0; i < spec.edges.size(); ++i) {
    const EdgeSpec& e = spec.edges[i];
    auto src = g.index_.find(e.src);
    if (src == g.index_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph.edges[", i, "].src \"", e.src, "\" is not a node"));
    }
    auto dst = g.index_.find(e.dst);
    if (dst == g.index_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph.edges[", i, "].dst \"", e.dst, "\" is not a node"));
    }
    if (src->second == dst->second) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph.edges[", i, "] is a self-loop on \"", e.src, "\""));
    }
    if (auto s = CheckNumber(e.bytes, absl::StrCat("graph.edges[", i, "].bytes")); !s.ok()) {
      return s;
    }
    const double bytes = e.bytes > 0 ? e.bytes : g.nodes_[src->second].output_bytes;
    g.edges_.push_back({src->second, dst->second, bytes});
  }

  // CSR adjacency.
  g.out_begin_.assign(n + 1, 0);
  g.in_begin_.assign(n + 1, 0);
  for (const Edge& e : g.edges_) {
    ++g.out_begin_[e.src + 1];
    ++g.in_begin_[e.dst + 1];
  }
  for (int v = 0; v < n; ++v) {
    g.out_begin_[v + 1] += g.out_begin_[v];
    g.in_begin_[v + 1] += g.in_begin_[v];
  }
  g.out_edge_ids_.resize(g.edges_.size());
  g.in_edge_ids_.resize(g.edges_.size());
  {
    std::vector<int> out_fill(g.out_begin_.begin(), g.out_begin_.end() - 1);
    std::vector<int> in_fill(g.in_begin_.begin(), g.in_begin_.end() - 1);
    for (int e = 0; e < g.num_edges(); ++e) {
      g.out_edge_ids_[out_fill[g.edges_[e].src]++] = e;
      g.in_edge_ids_[in_fill[g.edges_[e].dst]++] = e;
    }
  }

  // Depth of every node (longest path from a source), by Kahn's algorithm;
  // nodes on a cycle never get one and are reported below.
  std::vector<int> depth(n, 0), indegree_left(n);
  {
    std::vector<int> queue;
    for (int v = 0; v < n; ++v) {
      indegree_left[v] = g.in_begin_[v + 1] - g.in_begin_[v];
      if (indegree_left[v] == 0) queue.push_back(v);
    }
    for (size_t i = 0; i < queue.size(); ++i) {
      const int v = queue[i];
      for (int e : g.out_edges(v)) {
        const int w = g.edges_[e].dst;
        depth[w] = std::max(depth[w], depth[v] + 1);
        if (--indegree_left[w] == 0) queue.push_back(w);
      }
    }
  }
  // The order used for splitting is built backwards from the sinks with a
  // stack: a node is placed as soon as all its consumers are, and among
  // producers that become ready together the shallowest is placed first, so
  // side inputs (labels, masks, parameters) land right before their consumer
  // and the main path is not broken up by them; parallel branches stay
  // contiguous. Those are the orders whose blocks make good stages.
  std::vector<int> outdegree_left(n);
  std::vector<int> stack, ready;
  for (int v = 0; v < n; ++v) {
    outdegree_left[v] = g.out_begin_[v + 1] - g.out_begin_[v];
    if (outdegree_left[v] == 0) ready.push_back(v);
  }
  auto push_ready = [&] {
    // Deepest pushed first so the shallowest is popped (placed) first.
    std::stable_sort(ready.begin(), ready.end(), [&](int a, int b) { return depth[a] > depth[b]; });
    stack.insert(stack.end(), ready.begin(), ready.end());
    ready.clear();
  };
  push_ready();
  std::vector<int> reversed;
  reversed.reserve(n);
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    reversed.push_back(v);
    for (int e : g.in_edges(v)) {
      const int u = g.edges_[e].src;
      if (--outdegree_left[u] == 0) ready.push_back(u);
    }
    push_ready();
  }
  if (static_cast<int>(reversed.size()) != n) {
    std::vector<char> placed(n, 0);
    for (int v : reversed) placed[v] = 1;
    return absl::InvalidArgumentError(
        absl::StrCat("graph has a cycle: ", DescribeCycle(g, placed)));
  }
  g.topo_order_.assign(reversed.rbegin(), reversed.rend());
  g.topo_position_.resize(n);
  for (int i = 0; i < n; ++i) g.topo_position_[g.topo_order_[i]] = i;

  // Parameter groups: tied weights share one group.
  g.param_group_.assign(n, -1);
  absl::flat_hash_map<std::string_view, int> key_group;
  for (int v = 0; v < n; ++v) {
    const NodeSpec& node = g.nodes_[v];
    if (node.param_bytes <= 0) continue;
    int group;
    if (node.param_key.empty()) {
      group = g.num_param_groups_++;
      g.param_group_bytes_.push_back(0);
    } else {
      auto [it, inserted] = key_group.emplace(node.param_key, g.num_param_groups_);
      if (inserted) {
        ++g.num_param_groups_;
        g.param_group_bytes_.push_back(0);
      }
      group = it->second;
    }
    g.param_group_[v] = group;
    g.param_group_bytes_[group] = std::max(g.param_group_bytes_[group], node.param_bytes);
  }
  return g;
}

}  // namespace pipeplan
