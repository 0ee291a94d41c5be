#include "pipeplan/convert/plan_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/schedule/build.h"

namespace pipeplan {
namespace {

using schedule::ScheduleKind;

template <typename... Parts>
absl::Status Bad(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(parts...));
}

std::vector<std::string> RankDevices(const v1::Plan& plan) {
  std::vector<std::string> devices;
  for (const v1::Stage& s : plan.stages()) {
    if (std::find(devices.begin(), devices.end(), s.device_id()) == devices.end()) {
      devices.push_back(s.device_id());
    }
  }
  return devices;
}

absl::StatusOr<ScheduleKind> RunnableSchedule(v1::Schedule s) {
  absl::StatusOr<std::optional<ScheduleKind>> kind = ScheduleFromProto(s);
  if (!kind.ok()) return Bad("plan.schedule: ", static_cast<int>(s), " is not a known schedule");
  if (!kind->has_value()) {
    return Bad("plan.schedule: ", v1::Schedule_Name(s), " is not a runnable schedule");
  }
  return **kind;
}

// Stages per rank as the schedule places them; see the header.
absl::StatusOr<int> ChunksPerRank(ScheduleKind kind, int wire) {
  const std::string name(schedule::ScheduleKindName(kind));
  if (wire < 0) return Bad("plan.chunks_per_rank: ", wire, " must be >= 0 (0: the default)");
  const int per_rank = schedule::StagesPerRank(kind, wire > 0 ? wire : kDefaultChunksPerRank);
  if (wire > 0 && per_rank != wire) {
    return Bad("plan.chunks_per_rank: ", wire, ", but ", name, " places ", per_rank,
               per_rank == 1 ? " stage" : " stages", " on each rank");
  }
  return per_rank;
}

absl::Status DecodeStages(const v1::Plan& plan, DecodedPlan* out) {
  for (const v1::DeviceFactor& f : plan.calibration().devices()) {
    if (f.time_factor() > 0 && std::isfinite(f.time_factor())) {
      out->time_factors[f.device_id()] = f.time_factor();
    }
  }
  for (int s = 0; s < plan.stages_size(); ++s) {
    const v1::Stage& st = plan.stages(s);
    if (st.device_id().empty()) return Bad("plan.stages[", s, "].device_id: empty");
    auto factor = out->time_factors.find(st.device_id());
    out->stages.push_back({.device_id = st.device_id(),
                           .rank = out->RankOf(st.device_id()),
                           .forward_seconds = st.forward_seconds(),
                           .backward_seconds = st.backward_seconds(),
                           .comm_seconds = st.comm_seconds(),
                           .param_bytes = st.param_bytes(),
                           .activation_bytes = st.activation_bytes(),
                           .time_factor = factor == out->time_factors.end() ? 1.0 : factor->second,
                           .recompute = st.recompute(),
                           .allreduce_seconds = st.allreduce_seconds()});
  }
  return absl::OkStatus();
}

// The stage count and every stage's device must be what the schedule places.
absl::Status CheckPlacement(const DecodedPlan& p) {
  const std::string name(schedule::ScheduleKindName(p.schedule));
  if (int64_t{p.num_ranks} * p.chunks_per_rank != p.num_stages()) {
    return Bad("plan.stages: ", p.num_stages(), " stages on ", p.num_ranks,
               " ranks (devices), but ", name, " with chunks_per_rank ", p.chunks_per_rank,
               " places ", int64_t{p.num_ranks} * p.chunks_per_rank);
  }
  for (int s = 0; s < p.num_stages(); ++s) {
    const int rank = p.compute_schedule.stage_to_rank[s];
    if (p.stages[s].rank != rank) {
      return Bad("plan.stages[", s, "].device_id: \"", p.stages[s].device_id, "\", but ", name,
                 " places stage ", s, " on rank ", rank, " (device \"", p.rank_devices[rank],
                 "\")");
    }
  }
  return absl::OkStatus();
}

// Plan.replicas: empty reads as one replica on the stages' devices.
absl::Status DecodeReplicas(const v1::Plan& plan, DecodedPlan* out) {
  out->replica_devices = {out->rank_devices};
  if (plan.replicas_size() == 0) return absl::OkStatus();
  out->replica_devices.clear();
  std::map<std::string, std::string> where;  // device -> the field that names it
  for (int q = 0; q < plan.replicas_size(); ++q) {
    const v1::Replica& replica = plan.replicas(q);
    if (replica.rank_device_ids_size() != out->num_ranks) {
      return Bad("plan.replicas[", q, "].rank_device_ids: ", replica.rank_device_ids_size(),
                 " devices, but the plan has ", out->num_ranks, " ranks");
    }
    for (int r = 0; r < out->num_ranks; ++r) {
      const std::string& id = replica.rank_device_ids(r);
      const std::string field = absl::StrCat("plan.replicas[", q, "].rank_device_ids[", r, "]");
      if (id.empty()) return Bad(field, ": empty");
      if (q == 0 && id != out->rank_devices[r]) {
        return Bad(field, ": \"", id, "\", but the stages put rank ", r, " on \"",
                   out->rank_devices[r], "\"");
      }
      if (auto [it, inserted] = where.emplace(id, field); !inserted) {
        return Bad(field, ": \"", id, "\" is already ", it->second);
      }
    }
    out->replica_devices.emplace_back(replica.rank_device_ids().begin(),
                                      replica.rank_device_ids().end());
  }
  out->num_replicas = plan.replicas_size();
  return absl::OkStatus();
}

absl::Status DecodeNodeStages(const v1::Plan& plan, DecodedPlan* out) {
  out->node_stage.assign(plan.node_stage().begin(), plan.node_stage().end());
  for (size_t i = 0; i < out->node_stage.size(); ++i) {
    const int s = out->node_stage[i];
    if (s < 0 || s >= out->num_stages()) {
      return Bad("plan.node_stage[", i, "]: ", s, " is not a stage (the plan has ",
                 out->num_stages(), ")");
    }
  }
  return absl::OkStatus();
}

}  // namespace

int DecodedPlan::RankOf(std::string_view device_id) const {
  auto it = std::find(rank_devices.begin(), rank_devices.end(), device_id);
  if (it != rank_devices.end()) return static_cast<int>(it - rank_devices.begin());
  for (const std::vector<std::string>& replica : replica_devices) {
    auto at = std::find(replica.begin(), replica.end(), device_id);
    if (at != replica.end()) return static_cast<int>(at - replica.begin());
  }
  return -1;
}

int DecodedPlan::ReplicaOf(std::string_view device_id) const {
  for (size_t q = 0; q < replica_devices.size(); ++q) {
    const std::vector<std::string>& replica = replica_devices[q];
    if (std::find(replica.begin(), replica.end(), device_id) != replica.end()) {
      return static_cast<int>(q);
    }
  }
  if (std::find(rank_devices.begin(), rank_devices.end(), device_id) != rank_devices.end()) {
    return 0;
  }
  return -1;
}

std::vector<std::string> DecodedPlan::ReplicaGroup(int rank) const {
  std::vector<std::string> out;
  for (const std::vector<std::string>& replica : replica_devices) {
    if (rank >= 0 && rank < static_cast<int>(replica.size())) out.push_back(replica[rank]);
  }
  return out;
}

std::vector<PlannedStage> DecodedPlan::PlannedStages() const {
  std::vector<PlannedStage> out;
  out.reserve(stages.size());
  for (const DecodedStage& s : stages) {
    out.push_back({.device_id = s.device_id,
                   .forward_seconds = s.forward_seconds,
                   .backward_seconds = s.backward_seconds,
                   .time_factor = s.time_factor});
  }
  return out;
}

int RankOfDevice(const v1::Plan& plan, std::string_view device_id) {
  const std::vector<std::string> devices = RankDevices(plan);
  auto it = std::find(devices.begin(), devices.end(), device_id);
  if (it != devices.end()) return static_cast<int>(it - devices.begin());
  for (const v1::Replica& replica : plan.replicas()) {
    const auto& ids = replica.rank_device_ids();
    auto at = std::find(ids.begin(), ids.end(), device_id);
    if (at != ids.end()) return static_cast<int>(at - ids.begin());
  }
  return -1;
}

absl::StatusOr<DecodedPlan> DecodePlan(const v1::Plan& plan) {
  if (plan.stages_size() == 0) return Bad("plan.stages: empty; a plan needs at least one stage");
  DecodedPlan out;
  PIPEPLAN_ASSIGN_OR_RETURN(out.schedule, RunnableSchedule(plan.schedule()));
  PIPEPLAN_ASSIGN_OR_RETURN(out.comm_model,
                            CommModelFromProto(plan.comm_model(), "plan.comm_model:"));
  PIPEPLAN_ASSIGN_OR_RETURN(out.chunks_per_rank,
                            ChunksPerRank(out.schedule, plan.chunks_per_rank()));
  out.microbatches = plan.microbatches();
  out.allreduce_bucket_bytes = std::max(0.0, plan.allreduce_bucket_bytes());
  if (out.microbatches < 1) return Bad("plan.microbatches: ", out.microbatches, " must be >= 1");
  out.rank_devices = RankDevices(plan);
  out.num_ranks = static_cast<int>(out.rank_devices.size());
  PIPEPLAN_RETURN_IF_ERROR(DecodeStages(plan, &out));
  // In 64 bits: chunks_per_rank comes from the plan (any int32).
  if (int64_t{out.num_ranks} * out.chunks_per_rank == out.num_stages()) {
    absl::StatusOr<schedule::PipelineSchedule> built =
        schedule::BuildSchedule(out.schedule, out.num_ranks, out.microbatches, out.chunks_per_rank);
    if (!built.ok()) return Bad("plan: ", built.status().message());
    out.compute_schedule = *std::move(built);
  }
  PIPEPLAN_RETURN_IF_ERROR(CheckPlacement(out));
  PIPEPLAN_RETURN_IF_ERROR(DecodeReplicas(plan, &out));
  PIPEPLAN_RETURN_IF_ERROR(DecodeNodeStages(plan, &out));
  return out;
}

namespace {

int DeviceIndex(const Cluster& cluster, std::string_view id) {
  for (int d = 0; d < cluster.num_devices(); ++d) {
    if (cluster.device(d).id == id) return d;
  }
  return -1;
}

}  // namespace

absl::StatusOr<FixedPlan> FixedPlanOf(const DecodedPlan& plan, const Cluster& cluster,
                                      const PlanOptions& options) {
  FixedPlan fixed{.node_stage = plan.node_stage,
                  .schedule = plan.schedule,
                  .ranks = plan.num_ranks,
                  .microbatches = plan.microbatches,
                  .chunks_per_rank = plan.chunks_per_rank,
                  .comm_model = plan.comm_model,
                  .global_batch = options.global_batch,
                  .optimizer_state_multiplier = options.optimizer_state_multiplier,
                  .optimizer = options.optimizer,
                  .precision = options.precision};
  for (int s = 0; s < plan.num_stages(); ++s) {
    const int index = DeviceIndex(cluster, plan.stages[s].device_id);
    if (index < 0) {
      return absl::NotFoundError(absl::StrCat("plan.stages[", s, "].device_id: \"",
                                              plan.stages[s].device_id,
                                              "\" is not a device of the cluster"));
    }
    fixed.stage_device.push_back(index);
    fixed.stage_recompute.push_back(plan.stages[s].recompute ? 1 : 0);
  }
  if (plan.num_replicas > 1) {
    fixed.allreduce_bucket_bytes = plan.allreduce_bucket_bytes;
    for (int r = 0; r < plan.num_ranks; ++r) {
      std::vector<int>& group = fixed.replica_groups.emplace_back();
      for (const std::string& id : plan.ReplicaGroup(r)) {
        const int index = DeviceIndex(cluster, id);
        if (index < 0) {
          return absl::NotFoundError(absl::StrCat("plan.replicas: device \"", id, "\" of rank ", r,
                                                  " is not a device of the cluster"));
        }
        group.push_back(index);
      }
    }
  }
  return fixed;
}

}  // namespace pipeplan
