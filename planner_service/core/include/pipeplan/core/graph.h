// The model graph IR the planner works on: operator nodes with compute and
// memory costs, tensor edges with byte counts. A Graph is immutable and always
// valid: Graph::Build checks every rule (unique ids, known endpoints, no
// self-loops, no cycles, finite non-negative numbers, size limits) and reports
// the first violation with the offending field, e.g.
// `graph.edges[12].dst "fc9" is not a node`. Nodes keep the caller's order
// (their index is their position in the input); adjacency is stored as CSR and
// a topological order is precomputed.
//
// Thread safety: a built Graph is read-only and safe to share across threads.
#ifndef PIPEPLAN_CORE_GRAPH_H_
#define PIPEPLAN_CORE_GRAPH_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pipeplan {

struct NodeSpec {
  std::string id;
  std::string op;
  double forward_flops = 0;
  double backward_flops = 0;  // 0: twice the forward flops
  double param_bytes = 0;
  double activation_bytes = 0;  // 0: output_bytes
  double output_bytes = 0;
  std::optional<double> forward_seconds;
  std::optional<double> backward_seconds;
  std::string param_key;            // nodes sharing a non-empty key share parameters
  double weight_grad_fraction = 0;  // 0: one half
  std::string module;               // qualified module path; empty: the id
  // Outputs (EdgeSpec::output) whose tensors carry no gradient back.
  std::vector<int> outputs_without_grad;
};

struct EdgeSpec {
  std::string src;
  std::string dst;
  double bytes = 0;  // 0: src.output_bytes
  int output = 0;    // which of src's outputs the edge carries
};

struct GraphSpec {
  std::string name;
  std::vector<NodeSpec> nodes;
  std::vector<EdgeSpec> edges;
  double batch_size = 0;
  int element_bytes = 0;  // bytes per element the byte counts describe; 0: 4 (fp32)
};

// Inputs above these sizes are refused with RESOURCE_EXHAUSTED.
struct GraphLimits {
  size_t max_nodes = 2'000'000;
  size_t max_edges = 8'000'000;
};

class Graph {
 public:
  struct Edge {
    int src;
    int dst;
    double bytes;  // defaults resolved
    int output;    // which of src's outputs; edges of one output are one tensor
  };

  // Validates `spec` and builds the IR. Errors: INVALID_ARGUMENT naming the
  // field (duplicate id, unknown endpoint, self-loop, cycle with the nodes on
  // it, negative or non-finite number, empty graph); RESOURCE_EXHAUSTED when
  // a limit is exceeded.
  static absl::StatusOr<Graph> Build(GraphSpec spec, const GraphLimits& limits = {});

  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  double batch_size() const { return batch_size_; }
  // Bytes per element the graph's byte counts describe (4: fp32).
  int element_bytes() const { return element_bytes_; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  int num_edges() const { return static_cast<int>(edges_.size()); }

  const NodeSpec& node(int v) const { return nodes_[v]; }
  const Edge& edge(int e) const { return edges_[e]; }

  // Defaults resolved.
  double backward_flops(int v) const;
  double activation_bytes(int v) const;
  double weight_grad_fraction(int v) const;
  // Whether output `output` of v carries a gradient back (backward transfer).
  bool output_needs_grad(int v, int output) const;
  // True when some edge carries an output without gradient. The
  // partitioners charge every tensor both ways (and a node's outputs by
  // their largest), so their bounds hold only without such outputs.
  bool has_outputs_without_grad() const { return has_outputs_without_grad_; }
  // The module path of v: NodeSpec::module, or the id when that is empty.
  const std::string& module_path(int v) const {
    return nodes_[v].module.empty() ? nodes_[v].id : nodes_[v].module;
  }

  // Edge indices leaving / entering v.
  std::span<const int> out_edges(int v) const {
    return {out_edge_ids_.data() + out_begin_[v], out_edge_ids_.data() + out_begin_[v + 1]};
  }
  std::span<const int> in_edges(int v) const {
    return {in_edge_ids_.data() + in_begin_[v], in_edge_ids_.data() + in_begin_[v + 1]};
  }

  // A topological order (Kahn's algorithm, ties broken by a depth-first
  // preference so parallel branches stay together) and its inverse.
  std::span<const int> topo_order() const { return topo_order_; }
  int topo_position(int v) const { return topo_position_[v]; }

  // Dense id of the node's parameter group: nodes with the same param_key
  // share a group; every other node with parameters has its own. -1 for
  // nodes without parameters.
  int param_group(int v) const { return param_group_[v]; }
  int num_param_groups() const { return num_param_groups_; }
  // Parameter bytes of a group (the largest param_bytes among its nodes).
  double param_group_bytes(int g) const { return param_group_bytes_[g]; }

  std::optional<int> FindNode(absl::string_view id) const;

 private:
  Graph() = default;

  // The steps of Build, in order; each validates what it reads.
  absl::Status IndexNodes(std::vector<NodeSpec> nodes);
  absl::Status ResolveEdges(const std::vector<EdgeSpec>& edges);
  void BuildAdjacency();
  absl::Status BuildTopologicalOrder();
  void GroupParameters();

  std::string name_;
  double batch_size_ = 0;
  int element_bytes_ = 4;
  std::vector<NodeSpec> nodes_;
  std::vector<Edge> edges_;
  std::vector<int> out_begin_, out_edge_ids_, in_begin_, in_edge_ids_;
  std::vector<int> topo_order_, topo_position_;
  std::vector<int> param_group_;
  std::vector<double> param_group_bytes_;
  int num_param_groups_ = 0;
  bool has_outputs_without_grad_ = false;
  absl::flat_hash_map<std::string, int> index_;
};

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_GRAPH_H_
