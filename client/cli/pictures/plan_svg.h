// A plan as a picture (`pipeplan plan --svg FILE`): where the cuts fall in
// the model and what each stage costs.
//
// On top, the graph's nodes in a topological order along x, one thin bar per
// node (its height the square root of the node's forward time, or of its FLOPs
// when the graph has no measured times), grouped into stages: each stage a coloured band, a dark
// line at every cut. Under it one row per stage in the band's colour: the
// stage, its rank and device, its nodes (first .. last), its predicted time
// per microbatch as a bar (forward, backward, communication; the bottleneck
// in bold) and its peak memory as a bar inside the device's capacity.
//
// Nodes are ordered by (stage, position in the graph's topological order),
// itself a topological order of a valid plan, so every stage is one band
// even when the planner cut a DAG along other lines than the graph's order.
//
// Elements a reader (or a test) can count: one <rect class="stage-band">
// and one <g class="stage-row"> per stage, one <rect class="node"> per node.
// Pure function; no I/O.
#ifndef PIPEPLAN_CLIENT_CLI_PLAN_SVG_H_
#define PIPEPLAN_CLIENT_CLI_PLAN_SVG_H_

#include <string>

#include "absl/status/statusor.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::cli {

// `plan` as planned for `graph`. INVALID_ARGUMENT when the plan has no
// stages, or its node_stage does not give every node of `graph` a stage.
absl::StatusOr<std::string> PlanSvg(const Graph& graph, const v1::Plan& plan);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_PLAN_SVG_H_
