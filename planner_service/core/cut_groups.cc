#include "pipeplan/core/cut_groups.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan {
namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Members' costs summed into one node; times in seconds on the reference
// device so measured and flop-derived nodes can be mixed.
NodeSpec MergedNode(const Graph& graph, const std::vector<int>& members, double reference_flops) {
  NodeSpec out;
  out.op = "group";
  double forward = 0, backward = 0, weight = 0, activation = 0;
  std::map<int, std::string> groups;  // parameter group -> key (or a unique name)
  for (int v : members) {
    const NodeSpec& n = graph.node(v);
    const double f = n.forward_seconds ? *n.forward_seconds : n.forward_flops / reference_flops;
    const double b =
        n.backward_seconds ? *n.backward_seconds : graph.backward_flops(v) / reference_flops;
    forward += f;
    backward += b;
    weight += b * graph.weight_grad_fraction(v);
    activation += graph.activation_bytes(v);
    if (graph.param_group(v) >= 0) {
      groups.emplace(graph.param_group(v),
                     n.param_key.empty() ? absl::StrCat("#", n.id) : n.param_key);
    }
  }
  out.forward_seconds = forward;
  out.backward_seconds = backward;
  // A genuine zero is written as a negligible positive value (0 selects the
  // format's defaults).
  out.weight_grad_fraction = backward > 0 ? std::max(weight / backward, 1e-9) : 1e-9;
  out.activation_bytes = std::max(activation, 1e-9);
  std::vector<std::string> keys;
  for (const auto& [group, key] : groups) {
    out.param_bytes += graph.param_group_bytes(group);
    keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  out.param_key = absl::StrJoin(keys, "+");
  return out;
}

}  // namespace

absl::StatusOr<CutGranularity> ParseCutGranularity(std::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::string_view(text.data(), text.size()));
  if (t.empty() || t == "node") return CutGranularity{};
  if (t == "layer") return CutGranularity{CutGranularity::Kind::kLayer, 0};
  int depth = 0;
  if (t.rfind("module:", 0) == 0 && absl::SimpleAtoi(t.substr(7), &depth) && depth >= 1) {
    return CutGranularity{CutGranularity::Kind::kModule, depth};
  }
  return absl::InvalidArgumentError(absl::StrCat("options.cut_granularity \"", t,
                                                 "\" is not node, module:DEPTH (DEPTH >= 1) "
                                                 "or layer"));
}

std::string CutGroupKey(const Graph& graph, int v, const CutGranularity& granularity) {
  const std::string& path = graph.module_path(v);
  if (granularity.kind == CutGranularity::Kind::kNode) return graph.node(v).id;
  const std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  size_t keep = parts.size();
  if (granularity.kind == CutGranularity::Kind::kModule) {
    keep = std::min(keep, static_cast<size_t>(granularity.depth));
  } else {
    for (size_t i = 1; i < parts.size(); ++i) {
      if (AllDigits(parts[i])) {
        keep = i + 1;
        break;
      }
    }
  }
  // A path no deeper than the group is the group (nodes traced in one module
  // share it; a path that is the node's id is its own).
  if (keep >= parts.size()) return path;
  return absl::StrJoin(parts.begin(), parts.begin() + keep, ".");
}

std::vector<int> GroupedGraph::Expand(const std::vector<int>& stage_of_group) const {
  std::vector<int> out(group_of_node.size());
  for (size_t v = 0; v < group_of_node.size(); ++v) out[v] = stage_of_group[group_of_node[v]];
  return out;
}

absl::StatusOr<GroupedGraph> GroupForCuts(const Graph& graph, const CutGranularity& granularity,
                                          double reference_flops) {
  std::vector<int> group_of_node(graph.num_nodes());
  std::vector<std::string> names;
  absl::flat_hash_map<std::string, int> index;
  for (int v = 0; v < graph.num_nodes(); ++v) {
    std::string key = CutGroupKey(graph, v, granularity);
    auto [it, inserted] = index.emplace(key, static_cast<int>(names.size()));
    if (inserted) names.push_back(std::move(key));
    group_of_node[v] = it->second;
  }
  absl::StatusOr<GroupedGraph> out =
      GroupNodes(graph, std::move(group_of_node), reference_flops, names);
  if (!out.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.cut_granularity: groups cannot be kept whole, ", out.status().message(),
        " (a module that is not contiguous in the graph cannot sit on one stage)"));
  }
  return out;
}

absl::StatusOr<GroupedGraph> GroupNodes(const Graph& graph, std::vector<int> group_of_node,
                                        double reference_flops,
                                        const std::vector<std::string>& names) {
  GroupedGraph out;
  out.group_of_node = std::move(group_of_node);
  int groups = 0;
  for (int g : out.group_of_node) groups = std::max(groups, g + 1);
  std::vector<std::vector<int>> members(groups);
  for (int v = 0; v < graph.num_nodes(); ++v) members[out.group_of_node[v]].push_back(v);
  GraphSpec spec{.name = graph.name(),
                 .batch_size = graph.batch_size(),
                 .element_bytes = graph.element_bytes()};
  for (int g = 0; g < groups; ++g) {
    NodeSpec node = members[g].size() == 1 ? graph.node(members[g][0])
                                           : MergedNode(graph, members[g], reference_flops);
    node.id = static_cast<size_t>(g) < names.size() ? names[g] : graph.node(members[g][0]).id;
    node.outputs_without_grad.clear();
    spec.nodes.push_back(std::move(node));
  }
  // Each producing member is an output of its group; a member's outputs keep
  // their own indices when the group is that member alone.
  std::map<std::pair<int, int>, int> output_of;  // (member, its output) -> group output
  for (int e = 0; e < graph.num_edges(); ++e) {
    const Graph::Edge& edge = graph.edge(e);
    const int a = out.group_of_node[edge.src], b = out.group_of_node[edge.dst];
    if (a == b) continue;
    const bool alone = members[a].size() == 1;
    auto [it, inserted] = output_of.emplace(
        std::pair(edge.src, edge.output), alone ? edge.output : static_cast<int>(output_of.size()));
    if (!graph.output_needs_grad(edge.src, edge.output)) {
      spec.nodes[a].outputs_without_grad.push_back(it->second);
    }
    spec.edges.push_back(
        {spec.nodes[a].id, spec.nodes[b].id, std::max(edge.bytes, 1e-9), it->second});
  }
  for (NodeSpec& node : spec.nodes) {
    std::sort(node.outputs_without_grad.begin(), node.outputs_without_grad.end());
    node.outputs_without_grad.erase(
        std::unique(node.outputs_without_grad.begin(), node.outputs_without_grad.end()),
        node.outputs_without_grad.end());
  }
  PIPEPLAN_ASSIGN_OR_RETURN(Graph built, Graph::Build(std::move(spec), {}));
  out.graph = std::make_unique<Graph>(std::move(built));
  return out;
}

}  // namespace pipeplan
