#include "pipeplan/worker/runtime/stage_plan.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/v1/graph.pb.h"

namespace pipeplan::worker {
namespace {

// Per stage the graph's nodes, and per boundary the bytes that cross it.
void AddGraphLayout(const DecodedPlan& plan, const v1::ModelGraph& graph, StagePlan* out) {
  const int n = graph.nodes_size();
  out->stage_nodes.assign(out->num_stages, {});
  absl::flat_hash_map<std::string, int> index;
  for (int i = 0; i < n; ++i) {
    index[graph.nodes(i).id()] = i;
    out->stage_nodes[plan.node_stage[i]].push_back(i);
  }
  out->boundary_bytes.assign(std::max(0, out->num_stages - 1), 0.0);
  for (const v1::Edge& e : graph.edges()) {
    auto src = index.find(e.src());
    auto dst = index.find(e.dst());
    if (src == index.end() || dst == index.end()) continue;
    const int a = plan.node_stage[src->second];
    const int b = plan.node_stage[dst->second];
    const double bytes = e.bytes() > 0 ? e.bytes() : graph.nodes(src->second).output_bytes();
    for (int boundary = a; boundary < b; ++boundary) out->boundary_bytes[boundary] += bytes;
  }
}

// Per replica and rank the device's host.
void AddHosts(const v1::ClusterTopology& cluster, StagePlan* out) {
  absl::flat_hash_map<std::string, std::string> host;
  for (const v1::Device& d : cluster.devices()) host[d.id()] = d.host();
  for (const std::vector<std::string>& devices : out->replica_devices) {
    std::vector<std::string>& hosts = out->replica_hosts.emplace_back();
    for (const std::string& device : devices) {
      auto it = host.find(device);
      hosts.push_back(it == host.end() ? "" : it->second);
    }
  }
}

}  // namespace

int StagePlan::RankOf(std::string_view device_id) const {
  // A plan assembled by hand may list rank_devices only: one replica.
  if (replica_devices.empty()) {
    auto it = std::find(rank_devices.begin(), rank_devices.end(), device_id);
    return it == rank_devices.end() ? -1 : static_cast<int>(it - rank_devices.begin());
  }
  for (const std::vector<std::string>& devices : replica_devices) {
    auto it = std::find(devices.begin(), devices.end(), device_id);
    if (it != devices.end()) return static_cast<int>(it - devices.begin());
  }
  return -1;
}

int StagePlan::ReplicaOf(std::string_view device_id) const {
  if (replica_devices.empty()) return RankOf(device_id) < 0 ? -1 : 0;
  for (size_t q = 0; q < replica_devices.size(); ++q) {
    const std::vector<std::string>& devices = replica_devices[q];
    if (std::find(devices.begin(), devices.end(), device_id) != devices.end()) {
      return static_cast<int>(q);
    }
  }
  return -1;
}

absl::StatusOr<StagePlan> StagePlanFromProto(const v1::Plan& plan, int64_t version,
                                             const v1::ModelGraph* graph,
                                             const v1::ClusterTopology* cluster) {
  PIPEPLAN_ASSIGN_OR_RETURN(DecodedPlan decoded, DecodePlan(plan));
  StagePlan out;
  out.version = version;
  out.schedule = decoded.schedule;
  out.num_ranks = decoded.num_ranks;
  out.num_stages = decoded.num_stages();
  out.num_microbatches = decoded.microbatches;
  out.chunks_per_rank = decoded.chunks_per_rank;
  out.rank_devices = decoded.rank_devices;
  out.num_replicas = decoded.num_replicas;
  out.replica_devices = decoded.replica_devices;
  for (const DecodedStage& s : decoded.stages) {
    out.forward_seconds.push_back(s.forward_seconds);
    out.backward_seconds.push_back(s.backward_seconds);
    out.time_factor.push_back(s.time_factor);
    out.param_bytes.push_back(s.param_bytes);
    out.recompute.push_back(s.recompute);
  }
  out.allreduce_bucket_bytes = plan.allreduce_bucket_bytes();
  PIPEPLAN_ASSIGN_OR_RETURN(out.lowered, schedule::InsertSendRecv(decoded.compute_schedule));
  if (graph != nullptr && graph->nodes_size() == static_cast<int>(decoded.node_stage.size())) {
    AddGraphLayout(decoded, *graph, &out);
  }
  if (cluster != nullptr) AddHosts(*cluster, &out);
  return out;
}

}  // namespace pipeplan::worker
