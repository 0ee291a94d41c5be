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
  for (size_t k = 0; k < n.outputs_without_grad.size(); ++k) {
    if (n.outputs_without_grad[k] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".outputs_without_grad[", k, "] must be >= 0, got ", n.outputs_without_grad[k]));
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

// Depth of every node (longest path from a source), by Kahn's algorithm;
// nodes on a cycle keep the depth they reached (the caller reports the
// cycle).
std::vector<int> NodeDepths(const Graph& g) {
  const int n = g.num_nodes();
  std::vector<int> depth(n, 0), indegree_left(n);
  std::vector<int> queue;
  for (int v = 0; v < n; ++v) {
    indegree_left[v] = static_cast<int>(g.in_edges(v).size());
    if (indegree_left[v] == 0) queue.push_back(v);
  }
  for (size_t i = 0; i < queue.size(); ++i) {
    const int v = queue[i];
    for (int e : g.out_edges(v)) {
      const int w = g.edge(e).dst;
      depth[w] = std::max(depth[w], depth[v] + 1);
      if (--indegree_left[w] == 0) queue.push_back(w);
    }
  }
  return depth;
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

bool Graph::output_needs_grad(int v, int output) const {
  const std::vector<int>& none = nodes_[v].outputs_without_grad;
  return std::find(none.begin(), none.end(), output) == none.end();
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

  if (spec.element_bytes < 0 || spec.element_bytes > 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph.element_bytes must be in [0, 16] (0: 4, fp32), got ", spec.element_bytes));
  }
  Graph g;
  g.name_ = std::move(spec.name);
  g.batch_size_ = spec.batch_size;
  g.element_bytes_ = spec.element_bytes > 0 ? spec.element_bytes : 4;
  if (auto s = g.IndexNodes(std::move(spec.nodes)); !s.ok()) return s;
  if (auto s = g.ResolveEdges(spec.edges); !s.ok()) return s;
  g.BuildAdjacency();
  if (auto s = g.BuildTopologicalOrder(); !s.ok()) return s;
  g.GroupParameters();
  return g;
}

absl::Status Graph::IndexNodes(std::vector<NodeSpec> nodes) {
  index_.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (auto s = CheckNode(nodes[i], i); !s.ok()) return s;
    auto [it, inserted] = index_.emplace(nodes[i].id, static_cast<int>(i));
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("graph.nodes[", i, "].id \"", nodes[i].id,
                                                     "\" is duplicated (first at graph.nodes[",
                                                     it->second, "])"));
    }
  }
  nodes_ = std::move(nodes);
  return absl::OkStatus();
}

absl::Status Graph::ResolveEdges(const std::vector<EdgeSpec>& edges) {
  edges_.reserve(edges.size());
  for (size_t i = 0; i < edges.size(); ++i) {
    const EdgeSpec& e = edges[i];
    auto src = index_.find(e.src);
    if (src == index_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph.edges[", i, "].src \"", e.src, "\" is not a node"));
    }
    auto dst = index_.find(e.dst);
    if (dst == index_.end()) {
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
    if (e.output < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph.edges[", i, "].output must be >= 0, got ", e.output));
    }
    const double bytes = e.bytes > 0 ? e.bytes : nodes_[src->second].output_bytes;
    edges_.push_back({src->second, dst->second, bytes, e.output});
    if (!output_needs_grad(src->second, e.output)) has_outputs_without_grad_ = true;
  }
  return absl::OkStatus();
}

// CSR adjacency.
void Graph::BuildAdjacency() {
  const int n = num_nodes();
  out_begin_.assign(n + 1, 0);
  in_begin_.assign(n + 1, 0);
  for (const Edge& e : edges_) {
    ++out_begin_[e.src + 1];
    ++in_begin_[e.dst + 1];
  }
  for (int v = 0; v < n; ++v) {
    out_begin_[v + 1] += out_begin_[v];
    in_begin_[v + 1] += in_begin_[v];
  }
  out_edge_ids_.resize(edges_.size());
  in_edge_ids_.resize(edges_.size());
  std::vector<int> out_fill(out_begin_.begin(), out_begin_.end() - 1);
  std::vector<int> in_fill(in_begin_.begin(), in_begin_.end() - 1);
  for (int e = 0; e < num_edges(); ++e) {
    out_edge_ids_[out_fill[edges_[e].src]++] = e;
    in_edge_ids_[in_fill[edges_[e].dst]++] = e;
  }
}

absl::Status Graph::BuildTopologicalOrder() {
  const int n = num_nodes();
  const std::vector<int> depth = NodeDepths(*this);
  // The order used for splitting is built backwards from the sinks with a
  // stack: a node is placed as soon as all its consumers are, and among
  // producers that become ready together the shallowest is placed first, so
  // side inputs (labels, masks, parameters) land right before their consumer
  // and the main path is not broken up by them; parallel branches stay
  // contiguous. Those are the orders whose blocks make good stages.
  std::vector<int> outdegree_left(n);
  std::vector<int> stack, ready;
  for (int v = 0; v < n; ++v) {
    outdegree_left[v] = out_begin_[v + 1] - out_begin_[v];
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
    for (int e : in_edges(v)) {
      const int u = edges_[e].src;
      if (--outdegree_left[u] == 0) ready.push_back(u);
    }
    push_ready();
  }
  if (static_cast<int>(reversed.size()) != n) {
    std::vector<char> placed(n, 0);
    for (int v : reversed) placed[v] = 1;
    return absl::InvalidArgumentError(
        absl::StrCat("graph has a cycle: ", DescribeCycle(*this, placed)));
  }
  topo_order_.assign(reversed.rbegin(), reversed.rend());
  topo_position_.resize(n);
  for (int i = 0; i < n; ++i) topo_position_[topo_order_[i]] = i;
  return absl::OkStatus();
}

// Tied weights (the same param_key) share one group.
void Graph::GroupParameters() {
  const int n = num_nodes();
  param_group_.assign(n, -1);
  absl::flat_hash_map<std::string_view, int> key_group;
  for (int v = 0; v < n; ++v) {
    const NodeSpec& node = nodes_[v];
    if (node.param_bytes <= 0) continue;
    int group;
    if (node.param_key.empty()) {
      group = num_param_groups_++;
      param_group_bytes_.push_back(0);
    } else {
      auto [it, inserted] = key_group.emplace(node.param_key, num_param_groups_);
      if (inserted) {
        ++num_param_groups_;
        param_group_bytes_.push_back(0);
      }
      group = it->second;
    }
    param_group_[v] = group;
    param_group_bytes_[group] = std::max(param_group_bytes_[group], node.param_bytes);
  }
}

}  // namespace pipeplan
