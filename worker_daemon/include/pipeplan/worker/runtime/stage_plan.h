// What a worker needs from a plan version: the schedule lowered for every
// rank, per-stage compute times and the bytes that cross each stage
// boundary. Built on the one plan decoder (pipeplan/convert/plan_decoder.h),
// so the worker reads ranks, stages per rank and the schedule exactly as the
// planner and the CLI do; the runtime only sees the result.
#ifndef PIPEPLAN_WORKER_STAGE_PLAN_H_
#define PIPEPLAN_WORKER_STAGE_PLAN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/v1/cluster.pb.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::worker {

struct StagePlan {
  int64_t version = 0;
  schedule::ScheduleKind schedule = schedule::ScheduleKind::k1F1B;
  int num_ranks = 0;  // per replica
  int num_stages = 0;
  int num_microbatches = 0;  // per replica
  int chunks_per_rank = 1;
  // Device id of every rank of replica 0: the plan's distinct devices in
  // stage order (DecodedPlan::rank_devices).
  std::vector<std::string> rank_devices;
  // Data-parallel replicas of the pipeline, each on its own devices:
  // replica_devices[q][r] (replica_devices[0] == rank_devices).
  int num_replicas = 1;
  std::vector<std::vector<std::string>> replica_devices;
  // The host of each of those devices, replica_hosts[q][r], from the
  // request's cluster (Device.host; "" for a device it does not list). Empty
  // when built without a cluster. What the snapshot ring spreads over.
  std::vector<std::vector<std::string>> replica_hosts;
  // BuildSchedule + InsertSendRecv.
  schedule::PipelineSchedule lowered;
  // Per stage, seconds per microbatch as the plan predicts them.
  std::vector<double> forward_seconds;
  std::vector<double> backward_seconds;
  // Per stage, bytes of its parameters (what its gradient all-reduce over
  // the replicas carries).
  std::vector<double> param_bytes;
  // Per stage, whether the plan has it recompute its forward in the
  // backward (Stage.recompute): the torch executor then checkpoints it.
  std::vector<bool> recompute;
  // Gradient bytes per all-reduce bucket the plan was modelled with
  // (Plan.allreduce_bucket_bytes; 0 from a planner that predates it: the
  // executor's default).
  double allreduce_bucket_bytes = 0;
  // Per stage, the plan's calibration factor of the stage's device
  // (Plan.calibration: measured / modelled time; 1 when the plan models the
  // request's cluster as given). forward_seconds / factor is the time the
  // request's cluster alone predicts.
  std::vector<double> time_factor;
  // Per boundary b (stage b -> b + 1): bytes of every tensor produced at or
  // before stage b and consumed after it (what a relayed hop carries). Empty
  // without a graph.
  std::vector<double> boundary_bytes;
  // Per stage, the graph's node indices it holds, in graph order. Empty
  // without a graph.
  std::vector<std::vector<int>> stage_nodes;

  // The device's rank within its replica; -1 when the plan gives the device
  // no stage.
  int RankOf(std::string_view device_id) const;
  // The device's replica; -1 when the plan does not use it.
  int ReplicaOf(std::string_view device_id) const;
  // The index of (replica, rank) among all replicas x ranks devices of the
  // plan: replica-major, so replica 0's ranks come first.
  int WorldRank(int replica, int rank) const { return replica * num_ranks + rank; }
};

// `graph` (the plan's request graph) and `cluster` (its request cluster:
// the devices' hosts) may be null. INVALID_ARGUMENT naming the field when
// the plan is not runnable (DecodePlan): no stages, a schedule that is not
// concrete, a stage count or placement that is not the schedule's ranks x
// chunks_per_rank, microbatches BuildSchedule rejects.
absl::StatusOr<StagePlan> StagePlanFromProto(const v1::Plan& plan, int64_t version,
                                             const v1::ModelGraph* graph,
                                             const v1::ClusterTopology* cluster);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_STAGE_PLAN_H_
