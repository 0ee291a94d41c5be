// The one reader of a published plan (pipeplan.v1.Plan). The worker, the
// CLI's `simulate --plan`, the replan policy and the job registry all read a
// plan through this file, so they agree on its ranks, its stages per rank and
// its schedule, and reject a malformed plan with the same INVALID_ARGUMENT
// naming the field ("plan.stages[3].device_id: \"gpu1\", but ...").
// The other direction, a core PlanResult to a wire Plan, is PlanToProto
// (proto_convert.h).
//
// How a plan is read (the one set of defaults):
//  * Rank r runs on rank_devices[r], the plan's r-th distinct stage device in
//    stage order (RankOfDevice): the planner puts rank r on the r-th device
//    it uses.
//  * chunks_per_rank is the stages one rank holds as the schedule places
//    them, StagesPerRank(schedule, plan.chunks_per_rank). 0 reads as the
//    request's default, kDefaultChunksPerRank (2); a value the schedule
//    contradicts (1F1B with 2) is an error.
//  * The plan has ranks x chunks_per_rank stages, and stage s sits on the
//    device of the rank its schedule places it on.
//  * A stage's time factor is the plan's calibration factor of its device
//    when that is positive and finite, else 1.
//  * node_stage is empty or holds stage indices.
//  * Replicas: an empty Plan.replicas means one replica, the stages' devices
//    (every plan written before replicas existed reads so). Otherwise every
//    replica lists one device per rank, replica 0 the stages' devices, and no
//    device appears twice. Every replica runs the same stages, schedule and
//    microbatches on its own devices; the devices of rank r in every replica
//    (ReplicaGroup(r), by replica) all-reduce rank r's gradients after the
//    step's last backward, before the optimizer step.
//
// Thread safety: the functions are reentrant.
#ifndef PIPEPLAN_CONVERT_PLAN_DECODER_H_
#define PIPEPLAN_CONVERT_PLAN_DECODER_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan {

// One pipeline stage of a decoded plan; times are per microbatch, as the
// plan predicts them.
struct DecodedStage {
  std::string device_id;
  int rank = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
  double comm_seconds = 0;
  double param_bytes = 0;
  double activation_bytes = 0;
  // Measured / modelled time of the stage's device (Plan.calibration); 1
  // when the plan models the request's cluster as given.
  double time_factor = 1;
  bool recompute = false;        // the backward runs the forward again
  double allreduce_seconds = 0;  // this stage's gradients over its replicas
};

struct DecodedPlan {
  schedule::ScheduleKind schedule = schedule::ScheduleKind::k1F1B;
  int num_ranks = 0;
  int num_replicas = 1;
  int chunks_per_rank = 1;
  int microbatches = 0;  // per replica
  // Bytes per gradient bucket of the replicas' all-reduce (0: the default).
  double allreduce_bucket_bytes = 0;
  CommModel comm_model = CommModel::kDirect;
  // Device id of every rank of replica 0.
  std::vector<std::string> rank_devices;
  // Device id of every rank of every replica: replica_devices[q][r];
  // replica_devices[0] == rank_devices.
  std::vector<std::vector<std::string>> replica_devices;
  std::vector<DecodedStage> stages;
  // Stage of every graph node (parallel to the request's ModelGraph.nodes);
  // empty when the plan carries none.
  std::vector<int> node_stage;
  // The plan's calibration factors by device id, positive and finite only.
  std::map<std::string, double> time_factors;
  // The compute-only schedule (BuildSchedule) every reader runs or scores.
  schedule::PipelineSchedule compute_schedule;

  int num_stages() const { return static_cast<int>(stages.size()); }
  // The device's rank within its replica; -1 when the plan does not use it.
  int RankOf(std::string_view device_id) const;
  // The device's replica; -1 when the plan does not use it.
  int ReplicaOf(std::string_view device_id) const;
  // Rank r's all-reduce group: its device in every replica, by replica.
  std::vector<std::string> ReplicaGroup(int rank) const;
  // What the plan predicted per stage, for calibration against reports.
  std::vector<PlannedStage> PlannedStages() const;
};

// INVALID_ARGUMENT naming the field when the plan cannot run: no stages, a
// schedule that is not concrete, microbatches the schedule rejects, a stage
// count or placement that disagrees with the schedule, a node on no stage.
absl::StatusOr<DecodedPlan> DecodePlan(const v1::Plan& plan);

// The rank rule of DecodePlan on its own, for holders of plans that need
// not be runnable (the job registry keeps what it is given): the position of
// `device_id` among the plan's distinct stage devices in stage order, or its
// position in the Plan.replicas entry that lists it, or -1.
int RankOfDevice(const v1::Plan& plan, std::string_view device_id);

// The plan as a FixedPlan (calibration.h) on `cluster`, scored with the
// request's batch options, so the current plan and a new one can be compared
// under one cost model. NOT_FOUND when a stage's device is not in `cluster`
// (a device that was excluded).
absl::StatusOr<FixedPlan> FixedPlanOf(const DecodedPlan& plan, const Cluster& cluster,
                                      const PlanOptions& options);

}  // namespace pipeplan

#endif  // PIPEPLAN_CONVERT_PLAN_DECODER_H_
