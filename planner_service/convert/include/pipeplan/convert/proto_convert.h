// Conversion between the wire contract (pipeplan.v1 messages and their
// protobuf JSON form) and the planning core. Everything that accepts a
// PlanRequest — the CLI, the gRPC service, the benchmarks — goes through
// PlanInputs::FromRequest, so validation errors read the same everywhere:
// INVALID_ARGUMENT naming the field ("graph.edges[12].dst \"fc9\" is not a
// node"), RESOURCE_EXHAUSTED for inputs over the configured limits.
#ifndef PIPEPLAN_CONVERT_PROTO_CONVERT_H_
#define PIPEPLAN_CONVERT_PROTO_CONVERT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan {

// A validated request, ready for MakePlan. Owns the graph and the cluster.
struct PlanInputs {
  std::unique_ptr<Graph> graph;
  std::unique_ptr<Cluster> cluster;
  PlanOptions options;

  static absl::StatusOr<PlanInputs> FromRequest(const v1::PlanRequest& request,
                                                const GraphLimits& limits = {});
};

GraphSpec GraphSpecFromProto(const v1::ModelGraph& graph);
ClusterSpec ClusterSpecFromProto(const v1::ClusterTopology& cluster);
absl::StatusOr<PlanOptions> PlanOptionsFromProto(const v1::PlanOptions& options);
// options.num_ranks, or its deprecated alias options.num_stages when
// num_ranks is 0; INVALID_ARGUMENT when both are set and differ.
absl::StatusOr<int> NumRanksFromProto(const v1::PlanOptions& options);

// SCHEDULE_AUTO maps to nullopt; unknown values are INVALID_ARGUMENT.
absl::StatusOr<std::optional<schedule::ScheduleKind>> ScheduleFromProto(v1::Schedule s);
v1::Schedule ScheduleToProto(schedule::ScheduleKind kind);
v1::PartitionMethod MethodToProto(PartitionMethod method);
v1::Optimizer OptimizerToProto(Optimizer optimizer);
v1::Precision PrecisionToProto(Precision precision);
// Unknown values are INVALID_ARGUMENT "<field> <number> is not a known model".
absl::StatusOr<CommModel> CommModelFromProto(v1::CommModel m, std::string_view field);
v1::Plan PlanToProto(const Graph& graph, const Cluster& cluster, const PlanResult& plan);

// Protobuf JSON mapping; snake_case and lowerCamelCase field names accepted,
// unknown fields rejected with the parser's message.
absl::Status ParseJson(absl::string_view json, google::protobuf::Message* message);
std::string ToJson(const google::protobuf::Message& message, bool pretty = true);

}  // namespace pipeplan

#endif  // PIPEPLAN_CONVERT_PROTO_CONVERT_H_
