// Calibration of the cost model from measured step timings.
//
// Workers report, per step, one timing per action in PyTorch notation
// ("{stage}F{mb}", "{stage}B{mb}", "{stage}I{mb}", "{stage}W{mb}",
// "{stage}SEND_F{mb}", ...). EstimateDeviceFactors compares each report's
// measured compute (F, B, I, W) with what the plan predicted for the same
// actions and returns, per device, the median ratio over the window:
// measured seconds / seconds modelled from the request's cluster. A device
// whose factor is 2 runs twice as long as modelled; dividing its flops by 2
// (CalibratedFlops) makes the cost model predict what was measured.
//
// SEND/RECV timings are not used here: a SEND's time includes waiting for the
// peer to post the matching RECV, and a RECV's time includes the producer's
// compute, so neither isolates the link. Links are calibrated from the
// wall-clock post and completion times of both ends (link_calibration.h).
//
// SimulateFixedPlan scores an existing split (node -> stage, stage -> device,
// schedule) under a possibly calibrated cluster, the same way MakePlan scores
// its candidates, so an old plan and a new one can be compared under one model.
//
// Plain structs only (no protobuf): the server converts its reports.
// Thread safety: the functions are reentrant.
#ifndef PIPEPLAN_CORE_CALIBRATION_H_
#define PIPEPLAN_CORE_CALIBRATION_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/memory_model.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan {

struct TimingSample {
  std::string action;  // "1F3", "0SEND_F2", ...
  double seconds = 0;
  // When the rank reached the action, seconds after its step's start.
  double start_seconds = 0;
  // SEND/RECV only (0 when the worker did not report them): message bytes,
  // wall-clock post and wait-return times (microseconds since the epoch),
  // seconds the rank blocked in the wait.
  double bytes = 0;
  int64_t post_unix_us = 0;
  int64_t complete_unix_us = 0;
  double wait_seconds = 0;
};

// One worker's report of one step.
struct StepSample {
  std::string worker_id;
  // The device that ran the step; empty: each stage's planned device. A
  // worker of a data-parallel replica q > 0 runs replica 0's stages on its
  // own device, so its timings are that device's (compared with the stage's
  // times as planned for replica 0's device).
  std::string device_id;
  int64_t step = 0;
  std::vector<TimingSample> timings;
  // Optional (link calibration, measured metrics): the worker's rank, the
  // step's wall-clock start and its measured breakdown.
  int rank = -1;
  int replica = 0;  // the data-parallel replica whose `rank` ran the step
  int64_t start_unix_us = 0;
  double step_seconds = 0;
  double compute_seconds = 0;
  double comm_seconds = 0;
  double bubble_ratio = 0;
  double peak_memory_bytes = 0;
  // Seconds in the executor's EndStep (optimizer, reductions), 0 if absent.
  double optimizer_seconds = 0;
  // The part of them spent waiting for the replicas' gradient all-reduce;
  // negative: not reported (no replicas).
  double allreduce_exposed_seconds = -1;
  // The all-reduce probe (v1::ReportStepRequest): seconds of a ring
  // all-reduce of allreduce_probe_bytes over the worker's replica's ranks,
  // all probing at once; negative: not reported.
  double allreduce_probe_seconds = -1;
  double allreduce_probe_bytes = 0;
  // The CPU pool the worker's computes share (cpu_pools.h); empty pool:
  // they do not run on shared CPUs.
  std::string cpu_pool;
  int cpu_pool_cpus = 0;
  int compute_threads = 0;
  // The executor's W runs the backward again (v1::ReportStepRequest): a W
  // measures a full backward.
  bool weight_pass_repeats_backward = false;
};

// What the plan that produced the reports predicted for one pipeline stage.
struct PlannedStage {
  std::string device_id;
  double forward_seconds = 0;   // per microbatch
  double backward_seconds = 0;  // per microbatch, I + W
  // The plan's own calibration of the device (1: modelled from the request's
  // cluster as given). Factors are always relative to the uncalibrated model,
  // so they do not compound from one version to the next.
  double time_factor = 1;
};

struct CalibrationOptions {
  // The first `warmup_steps` steps of each worker in the window are ignored
  // (connection set-up, page faults, allocator growth).
  int warmup_steps = 1;
  // A device needs this many reports after warm-up to get a factor.
  int min_samples = 3;
  // I's share of a full backward when a report splits B into I and W
  // (the synthetic executor's 50/50); I + W of one microbatch is exact.
  double input_grad_fraction = 0.5;
};

struct DeviceFactor {
  std::string device_id;
  double time_factor = 1;  // median of measured / modelled
  int samples = 0;
};

struct CalibrationResult {
  // Devices with at least min_samples reports, sorted by id.
  std::vector<DeviceFactor> devices;
  int reports_used = 0;  // after warm-up, with compute actions
  // Median of the device factors (1 when there are none).
  double median_factor = 1;

  // The factor of `device_id`, or nullptr.
  const DeviceFactor* Find(const std::string& device_id) const;
};

// Warm-up: the first step of each worker that counts, after its first
// `warmup_steps` distinct steps among `samples` (INT64_MAX: none counts yet).
// EstimateDeviceFactors skips the earlier ones; so do the planner's other
// readers of step reports.
std::map<std::string, int64_t> FirstCountedSteps(std::span<const StepSample> samples,
                                                 int warmup_steps);

// `samples` are reports of one plan version; `stages` are that version's
// stages in order. Action names that do not parse, or name a stage outside
// `stages`, are INVALID_ARGUMENT. Too few reports is not an error: the
// result simply has no (or fewer) devices.
absl::StatusOr<CalibrationResult> EstimateDeviceFactors(std::span<const StepSample> samples,
                                                        std::span<const PlannedStage> stages,
                                                        const CalibrationOptions& options = {});

// The cluster with every device's flops divided by its factor (devices
// without one get `default_factor`, normally the median) and `excluded`
// devices (and their links) removed. INVALID_ARGUMENT when nothing is left or
// a factor is not positive and finite.
absl::StatusOr<ClusterSpec> CalibratedClusterSpec(const ClusterSpec& nominal,
                                                  const std::map<std::string, double>& factors,
                                                  double default_factor,
                                                  const std::vector<std::string>& excluded);

// A split to score: as MakePlan would have produced it.
struct FixedPlan {
  std::vector<int> node_stage;    // per graph node
  std::vector<int> stage_device;  // per stage, index into the cluster
  schedule::ScheduleKind schedule = schedule::ScheduleKind::k1F1B;
  int ranks = 0;
  int microbatches = 0;
  int chunks_per_rank = 1;  // for interleaved and V schedules
  CommModel comm_model = CommModel::kDirect;
  int global_batch = 0;  // 0: graph costs are per microbatch
  double optimizer_state_multiplier = 0;
  Optimizer optimizer = kDefaultOptimizer;
  Precision precision = kDefaultPrecision;
  // Per stage: recomputes activations (empty: none).
  std::vector<char> stage_recompute;
  // With data-parallel replicas, per rank: the cluster index of the rank's
  // device in every replica, the group that all-reduces the rank's
  // gradients after its last backward (allreduce.h). Empty: one replica.
  std::vector<std::vector<int>> replica_groups;
  double allreduce_bucket_bytes = 0;  // 0: kDefaultBucketBytes
};

struct FixedPlanScore {
  double step_seconds = 0;
  std::vector<double> stage_compute_seconds;  // per stage: F + B per microbatch
};

// What scoring a fixed plan starts from, shared by SimulateFixedPlan and the
// as-run model (runtime_model.h). The schedule `plan` runs: INVALID_ARGUMENT
// when its stage count is not the plan's.
absl::StatusOr<schedule::PipelineSchedule> FixedPlanSchedule(const FixedPlan& plan);
// `plan`'s batch, optimizer, precision and comm model as planning options.
PlanOptions FixedPlanOptions(const FixedPlan& plan);
// The cost model of `plan`'s batch, optimizer, precision and comm model.
CostModel FixedPlanCostModel(const Graph& graph, const Cluster& cluster, const FixedPlan& plan);
// Each stage's cost under `cost`, recomputation applied where the plan asks.
absl::StatusOr<std::vector<StageCost>> FixedPlanStageCosts(const CostModel& cost,
                                                           const FixedPlan& plan);

// Simulated step time of `plan` under `cluster`'s cost model.
absl::StatusOr<FixedPlanScore> SimulateFixedPlan(const Graph& graph, const Cluster& cluster,
                                                 const FixedPlan& plan);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_CALIBRATION_H_
