// Cut granularity: where a plan may cut the model. Users of Megatron or
// DeepSpeed expect stages to hold whole layers; `module:DEPTH` keeps every
// module named by the first DEPTH components of a node's module path
// (NodeSpec::module, else its id) on one stage, and `layer` keeps every
// numbered block whole (transformer.h.7, layer3.1: the path up to its first
// numeric component). Nodes outside any such group are free (a node's
// group is then its module path, or its id when it has none).
//
// Every partition method honours it the same way: the planner splits the
// grouped graph (one node per group, costs summed, each member's output
// kept as a separate output) and maps the split back to the graph, where
// the cost model evaluates it exactly.
//
// Thread safety: plain functions on values.
#ifndef PIPEPLAN_CORE_CUT_GROUPS_H_
#define PIPEPLAN_CORE_CUT_GROUPS_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/graph.h"

namespace pipeplan {

struct CutGranularity {
  enum class Kind { kNode, kModule, kLayer };
  Kind kind = Kind::kNode;
  int depth = 0;  // kModule only, >= 1
};

// "" or "node", "module:DEPTH", "layer"; INVALID_ARGUMENT naming
// options.cut_granularity otherwise.
absl::StatusOr<CutGranularity> ParseCutGranularity(std::string_view text);

// The group every node belongs to under `granularity` (its key), e.g.
// "transformer.h.3" for transformer.h.3.attn.q_proj under module:3.
std::string CutGroupKey(const Graph& graph, int v, const CutGranularity& granularity);

struct GroupedGraph {
  std::unique_ptr<Graph> graph;    // one node per group, in first-member order
  std::vector<int> group_of_node;  // graph node -> grouped node

  // The split of the graph that puts every member where its group is.
  std::vector<int> Expand(const std::vector<int>& stage_of_group) const;
};

// The grouped graph. Measured times and flops are summed as seconds on a
// device of `reference_flops` (the cluster's fastest). INVALID_ARGUMENT when
// groups depend on each other both ways (a module that is not contiguous in
// the graph cannot sit on one stage), naming them.
absl::StatusOr<GroupedGraph> GroupForCuts(const Graph& graph, const CutGranularity& granularity,
                                          double reference_flops);

// The graph with the nodes of each group merged: `group_of_node` holds dense
// group ids; a group is named after its first member (or `names[g]` when
// given). Errors as GroupForCuts.
absl::StatusOr<GroupedGraph> GroupNodes(const Graph& graph, std::vector<int> group_of_node,
                                        double reference_flops,
                                        const std::vector<std::string>& names = {});

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_CUT_GROUPS_H_
