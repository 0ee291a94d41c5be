#include "pipeplan/convert/proto_convert.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "pipeplan/common/enum_names.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/common/torch_device.h"
#include "pipeplan/core/schedule/action.h"

namespace pipeplan {

using schedule::ScheduleKind;

namespace {

// The wire enums and the core's. OPTIMIZER_DEFAULT and PRECISION_DEFAULT
// (0, unset) read as the core's defaults; they come last so that the core's
// default writes as its own name (ADAM, BF16_MIXED). SCHEDULE_AUTO has no
// kind.
constexpr auto kSchedules = MakeEnumMap<v1::Schedule, ScheduleKind>(
    {{v1::SCHEDULE_GPIPE, ScheduleKind::kGPipe},
     {v1::SCHEDULE_1F1B, ScheduleKind::k1F1B},
     {v1::SCHEDULE_INTERLEAVED_1F1B, ScheduleKind::kInterleaved1F1B},
     {v1::SCHEDULE_LOOPED_BFS, ScheduleKind::kLoopedBFS},
     {v1::SCHEDULE_INTERLEAVED_ZERO_BUBBLE, ScheduleKind::kInterleavedZeroBubble},
     {v1::SCHEDULE_ZBV_ZERO_BUBBLE, ScheduleKind::kZBVZeroBubble},
     {v1::SCHEDULE_DUALPIPE_V, ScheduleKind::kDualPipeV}});
constexpr auto kOptimizers =
    MakeEnumMap<v1::Optimizer, Optimizer>({{v1::OPTIMIZER_SGD, Optimizer::kSgd},
                                           {v1::OPTIMIZER_MOMENTUM, Optimizer::kMomentum},
                                           {v1::OPTIMIZER_ADAM, Optimizer::kAdam},
                                           {v1::OPTIMIZER_DEFAULT, kDefaultOptimizer}});
constexpr auto kPrecisions =
    MakeEnumMap<v1::Precision, Precision>({{v1::PRECISION_FP32, Precision::kFp32},
                                           {v1::PRECISION_BF16_MIXED, Precision::kBf16Mixed},
                                           {v1::PRECISION_FP64, Precision::kFp64},
                                           {v1::PRECISION_DEFAULT, kDefaultPrecision}});
constexpr auto kMethods = MakeEnumMap<v1::PartitionMethod, PartitionMethod>(
    {{v1::METHOD_AUTO, PartitionMethod::kAuto},
     {v1::METHOD_DP, PartitionMethod::kDp},
     {v1::METHOD_MILP, PartitionMethod::kMilp},
     {v1::METHOD_UNIFORM, PartitionMethod::kUniform},
     {v1::METHOD_PARAMS, PartitionMethod::kParams},
     {v1::METHOD_TIME, PartitionMethod::kTime},
     {v1::METHOD_IDEAL_DP, PartitionMethod::kIdealDp}});
constexpr auto kCommModels = MakeEnumMap<v1::CommModel, CommModel>(
    {{v1::COMM_DIRECT, CommModel::kDirect}, {v1::COMM_RELAY, CommModel::kRelay}});

// The core's value of the wire value `wire` of `field`, or INVALID_ARGUMENT
// "<field> <number> is not a known <what>".
template <typename Map, typename Wire>
auto FromWire(const Map& map, Wire wire, std::string_view field, std::string_view what)
    -> absl::StatusOr<decltype(map.pairs[0].b)> {
  if (auto value = map.Forward(wire)) return *value;
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), " ", static_cast<int>(wire),
                                                 " is not a known ", std::string(what)));
}

}  // namespace

absl::StatusOr<std::optional<ScheduleKind>> ScheduleFromProto(v1::Schedule s) {
  if (s == v1::SCHEDULE_AUTO) return std::optional<ScheduleKind>();
  PIPEPLAN_ASSIGN_OR_RETURN(ScheduleKind kind,
                            FromWire(kSchedules, s, "options.schedule", "schedule"));
  return std::optional<ScheduleKind>(kind);
}

absl::StatusOr<CommModel> CommModelFromProto(v1::CommModel m, std::string_view field) {
  return FromWire(kCommModels, m, field, "model");
}

GraphSpec GraphSpecFromProto(const v1::ModelGraph& graph) {
  GraphSpec spec;
  spec.name = graph.name();
  spec.batch_size = graph.batch_size();
  spec.element_bytes = graph.element_bytes();
  spec.nodes.reserve(graph.nodes_size());
  for (const v1::Node& n : graph.nodes()) {
    NodeSpec s{
        .id = n.id(),
        .op = n.op(),
        .forward_flops = n.forward_flops(),
        .backward_flops = n.backward_flops(),
        .param_bytes = n.param_bytes(),
        .activation_bytes = n.activation_bytes(),
        .output_bytes = n.output_bytes(),
        .param_key = n.param_key(),
        .weight_grad_fraction = n.weight_grad_fraction(),
        .module = n.module(),
        .outputs_without_grad = {n.outputs_without_grad().begin(), n.outputs_without_grad().end()}};
    if (n.has_forward_seconds()) s.forward_seconds = n.forward_seconds();
    if (n.has_backward_seconds()) s.backward_seconds = n.backward_seconds();
    spec.nodes.push_back(std::move(s));
  }
  spec.edges.reserve(graph.edges_size());
  for (const v1::Edge& e : graph.edges()) {
    spec.edges.push_back({e.src(), e.dst(), e.bytes(), e.output()});
  }
  return spec;
}

ClusterSpec ClusterSpecFromProto(const v1::ClusterTopology& cluster) {
  ClusterSpec spec{.intra_host_bandwidth = cluster.intra_host_bandwidth(),
                   .inter_host_bandwidth = cluster.inter_host_bandwidth(),
                   .intra_host_latency = cluster.intra_host_latency(),
                   .inter_host_latency = cluster.inter_host_latency()};
  for (const v1::Device& d : cluster.devices()) {
    spec.devices.push_back({d.id(), d.host(), d.flops(), d.memory_bytes()});
  }
  for (const v1::Link& l : cluster.links()) {
    spec.links.push_back({l.src(), l.dst(), l.bandwidth_bytes_per_second(), l.latency_seconds()});
  }
  return spec;
}

// PlanOptions.num_stages and Alternative.num_stages are deprecated aliases of
// num_ranks (plan.proto); this file is the only code that touches them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
absl::StatusOr<int> NumRanksFromProto(const v1::PlanOptions& o) {
  if (o.num_ranks() != 0 && o.num_stages() != 0 && o.num_ranks() != o.num_stages()) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.num_ranks is ", o.num_ranks(), " but its deprecated alias ",
                     "options.num_stages is ", o.num_stages(), "; set only options.num_ranks"));
  }
  return o.num_ranks() != 0 ? o.num_ranks() : o.num_stages();
}

namespace {
void SetAlternativeRanks(int num_ranks, v1::Alternative* alt) {
  alt->set_num_ranks(num_ranks);
  alt->set_num_stages(num_ranks);  // for clients that predate num_ranks
}

}  // namespace
#pragma GCC diagnostic pop

absl::StatusOr<PlanOptions> PlanOptionsFromProto(const v1::PlanOptions& o) {
  PlanOptions out{.num_replicas = o.num_replicas(),
                  .max_replicas = o.max_replicas(),
                  .microbatches = o.microbatches(),
                  .global_batch = o.global_batch(),
                  .allreduce_bucket_bytes = o.allreduce_bucket_bytes(),
                  .optimizer_state_multiplier = o.optimizer_state_multiplier(),
                  .cut_granularity = o.cut_granularity(),
                  .chunks_per_rank = o.chunks_per_rank(),
                  .time_limit_seconds = o.time_limit_seconds(),
                  .relative_gap = o.relative_gap()};
  if (!(o.allreduce_bucket_bytes() >= 0) || !std::isfinite(o.allreduce_bucket_bytes())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.allreduce_bucket_bytes must be >= 0, got ", o.allreduce_bucket_bytes()));
  }
  // Bounded here so no product of request sizes overflows further on.
  if (o.chunks_per_rank() > schedule::kMaxStages) {
    return absl::InvalidArgumentError(absl::StrCat("options.chunks_per_rank is ",
                                                   o.chunks_per_rank(), "; at most ",
                                                   schedule::kMaxStages, " are supported"));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(out.num_ranks, NumRanksFromProto(o));
  PIPEPLAN_ASSIGN_OR_RETURN(out.schedule, ScheduleFromProto(o.schedule()));
  PIPEPLAN_ASSIGN_OR_RETURN(out.optimizer,
                            FromWire(kOptimizers, o.optimizer(), "options.optimizer", "optimizer"));
  PIPEPLAN_ASSIGN_OR_RETURN(out.precision,
                            FromWire(kPrecisions, o.precision(), "options.precision", "precision"));
  PIPEPLAN_ASSIGN_OR_RETURN(out.method, FromWire(kMethods, o.method(), "options.method", "method"));
  PIPEPLAN_ASSIGN_OR_RETURN(out.comm_model,
                            CommModelFromProto(o.comm_model(), "options.comm_model"));
  return out;
}

namespace {
// Device.torch_device is only read by the workers; a name they cannot read
// is rejected with the request, not at a worker's start.
absl::Status CheckTorchDevices(const v1::ClusterTopology& cluster) {
  for (const v1::Device& d : cluster.devices()) {
    if (d.torch_device().empty()) continue;
    if (absl::StatusOr<common::TorchDeviceName> name = common::ParseTorchDevice(d.torch_device());
        !name.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster device \"", d.id(), "\": ", name.status().message()));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<PlanInputs> PlanInputs::FromRequest(const v1::PlanRequest& request,
                                                   const GraphLimits& limits) {
  PlanInputs in;
  PIPEPLAN_RETURN_IF_ERROR(CheckTorchDevices(request.cluster()));
  PIPEPLAN_ASSIGN_OR_RETURN(Graph graph, Graph::Build(GraphSpecFromProto(request.graph()), limits));
  in.graph = std::make_unique<Graph>(std::move(graph));
  PIPEPLAN_ASSIGN_OR_RETURN(Cluster cluster,
                            Cluster::Build(ClusterSpecFromProto(request.cluster())));
  in.cluster = std::make_unique<Cluster>(std::move(cluster));
  PIPEPLAN_ASSIGN_OR_RETURN(in.options, PlanOptionsFromProto(request.options()));
  return in;
}

v1::Schedule ScheduleToProto(ScheduleKind kind) {
  return kSchedules.Backward(kind).value_or(v1::SCHEDULE_AUTO);
}

v1::PartitionMethod MethodToProto(PartitionMethod method) {
  return kMethods.Backward(method).value_or(v1::METHOD_AUTO);
}

v1::Optimizer OptimizerToProto(Optimizer optimizer) {
  return kOptimizers.Backward(optimizer).value_or(v1::OPTIMIZER_DEFAULT);
}

v1::Precision PrecisionToProto(Precision precision) {
  return kPrecisions.Backward(precision).value_or(v1::PRECISION_DEFAULT);
}

namespace {

void AddStages(const Graph& graph, const Cluster& cluster, const PlanResult& plan, v1::Plan& out) {
  const Partition& part = plan.partition;
  const int k = static_cast<int>(part.stages.size());
  // First and last node of each stage in topological order.
  std::vector<int> first(k, -1), last(k, -1);
  for (int v : graph.topo_order()) {
    const int s = part.stage_of_node[v];
    if (first[s] < 0) first[s] = v;
    last[s] = v;
  }
  for (int j = 0; j < k; ++j) {
    const StageCost& c = part.stages[j];
    v1::Stage* st = out.add_stages();
    st->set_index(j);
    st->set_device_id(cluster.device(plan.stage_device[j]).id);
    st->set_num_nodes(c.num_nodes);
    st->set_first_node(graph.node(first[j]).id);
    st->set_last_node(graph.node(last[j]).id);
    st->set_forward_seconds(c.forward_seconds);
    st->set_backward_seconds(c.backward_seconds);
    st->set_comm_seconds(c.comm_seconds());
    st->set_stage_seconds(c.total_seconds());
    st->set_param_bytes(c.param_bytes);
    st->set_activation_bytes(c.activation_bytes);
    st->set_inflight_microbatches(plan.stage_inflight[j]);
    st->set_peak_memory_bytes(plan.stage_peak_memory.empty()
                                  ? c.peak_memory_bytes(plan.stage_inflight[j])
                                  : plan.stage_peak_memory[j]);
    st->set_memory_capacity_bytes(cluster.device(plan.stage_device[j]).memory_bytes /
                                  std::max(1, plan.chunks_per_rank));
    st->set_recompute(c.recompute);
    if (j < static_cast<int>(plan.stage_allreduce_seconds.size())) {
      st->set_allreduce_seconds(plan.stage_allreduce_seconds[j]);
    }
  }
}

void AddSolverReport(const PlanResult& plan, v1::SolverReport* r) {
  r->set_method(plan.method);
  r->set_objective(plan.partition.objective);
  r->set_lower_bound(plan.lower_bound);
  r->set_gap(plan.gap);
  r->set_seconds(plan.solve_seconds);
  r->set_nodes_explored(plan.nodes_explored);
  r->set_contracted_nodes(plan.contracted_nodes);
  for (const MethodOutcome& m : plan.candidates) {
    v1::MethodResult* mr = r->add_candidates();
    mr->set_method(m.method);
    if (m.objective) mr->set_objective(*m.objective);
    mr->set_seconds(m.seconds);
    mr->set_note(m.note);
  }
}

void SetAlternative(const PlanAlternative& a, v1::Alternative* alt) {
  alt->set_schedule(ScheduleToProto(a.schedule));
  alt->set_microbatches(a.microbatches);
  SetAlternativeRanks(a.num_ranks, alt);
  alt->set_num_replicas(a.num_replicas);
  alt->set_step_seconds(a.step_seconds);
  alt->set_peak_memory_bytes(a.peak_memory_bytes);
  alt->set_bubble_ratio(a.bubble_ratio);
  alt->set_idle_devices(a.idle_devices);
  alt->set_degenerate(a.degenerate);
}

// Written only with several replicas, so a single-replica plan reads
// exactly as before.
void AddReplicas(const Cluster& cluster, const PlanResult& plan, v1::Plan& out) {
  if (plan.num_replicas <= 1) return;
  for (int q = 0; q < plan.num_replicas; ++q) {
    v1::Replica* replica = out.add_replicas();
    for (int r = 0; r < plan.num_ranks; ++r) {
      replica->add_rank_device_ids(cluster.device(plan.rank_device[q * plan.num_ranks + r]).id);
    }
  }
}

}  // namespace

v1::Plan PlanToProto(const Graph& graph, const Cluster& cluster, const PlanResult& plan) {
  v1::Plan out;
  out.set_graph_name(graph.name());
  AddStages(graph, cluster, plan, out);
  const Partition& part = plan.partition;
  out.mutable_node_stage()->Assign(part.stage_of_node.begin(), part.stage_of_node.end());
  out.set_schedule(ScheduleToProto(plan.schedule));
  out.set_microbatches(plan.microbatches);
  out.set_comm_model(kCommModels.Backward(plan.comm_model).value_or(v1::COMM_DIRECT));
  out.set_step_seconds(plan.step_seconds);
  out.set_bubble_ratio(plan.bubble_ratio);
  out.set_bottleneck_seconds(part.objective);
  out.set_chunks_per_rank(plan.chunks_per_rank);
  AddSolverReport(plan, out.mutable_solver());
  for (const PlanAlternative& a : plan.alternatives) SetAlternative(a, out.add_alternatives());
  for (const PlanAlternative& a : plan.shapes) SetAlternative(a, out.add_shapes());
  AddReplicas(cluster, plan, out);
  out.set_allreduce_exposed_seconds(plan.allreduce_exposed_seconds);
  out.set_allreduce_bucket_bytes(plan.allreduce_bucket_bytes);
  out.set_placement(plan.placement);
  out.set_search_gap(plan.search_gap);
  return out;
}

absl::Status ParseJson(absl::string_view json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid ", message->GetDescriptor()->name(),
                     " JSON: ", std::string(status.message().data(), status.message().size())));
  }
  return absl::OkStatus();
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

}  // namespace pipeplan
