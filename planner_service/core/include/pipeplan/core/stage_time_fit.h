// Stage times as an executor measures them: a fixed cost per action plus a
// multiple of the modelled seconds, times the device's own factor.
//
// Device factors (calibration.h) scale a device's modelled compute: right
// when the model is off by a constant per device (a slower GPU, a
// straggler). A real executor on small stages is not: each F or B pays a
// fixed dispatch cost (Python-free LibTorch still launches every op, and an
// optimizer step pays per tensor), so a device factor fitted on one split is
// hundreds of times the modelled flops there and nonsense on a split that
// gives the device more (or fewer, smaller) stages. FitStageTimes fits, over
// the stages of the running plan, measured seconds per action = fixed +
// scale x nominal modelled seconds (forward and backward apart, pooled over
// devices), then each device's residual factor (median of measured / fitted,
// normalised so the median device is 1: a straggler stays a straggler).
// When the stages' modelled times are too alike to tell the fixed part from
// the scale, the fixed part is 0 and the fit is the device factors'.
//
// A split elsewhere moves nodes of other kinds onto a device (an embedding
// that the flops undercount, a loss whose softmax dominates): one scale for
// the whole model prices it wrong. FitStageKinds refits the scale per
// operator kind (node_corrections.h) over the same stages, after the fixed
// part and each device's residual: every stage's F (and B) is then the
// fixed cost plus the sum over its nodes of the kind's factor x modelled
// seconds, whatever the split.
//
// The end of a step, after the last compute (the executor's EndStep:
// optimizer update, gradient clipping, loss reduction), is measured too: the
// least time any rank spent in it (the rank that arrived last did not wait
// for the others), median over steps.
//
// Pure; no I/O.
#ifndef PIPEPLAN_CORE_STAGE_TIME_FIT_H_
#define PIPEPLAN_CORE_STAGE_TIME_FIT_H_

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pipeplan/core/calibration.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/node_corrections.h"
#include "pipeplan/core/schedule/stage_costs.h"
#include "pipeplan/core/update_fit.h"

namespace pipeplan {

struct StageTimeFit {
  bool fitted = false;
  double forward_fixed = 0, forward_scale = 1;
  double backward_fixed = 0, backward_scale = 1;
  // Device id -> residual factor (1 for a device without one). Devices on
  // one CPU pool (cpu_pools.h) share their pool's: same cores, same speed.
  std::map<std::string, double> device_factor;
  // The factor each device's flops were divided by in the cluster the
  // costs are computed on (divided out again to get nominal seconds), and
  // the one for devices not listed.
  std::map<std::string, double> cluster_factor;
  double cluster_default_factor = 1;
  // Seconds after the last compute of a step (EndStep), 0 if not measured.
  double end_step_seconds = 0;
  // Each rank's optimizer update after the ranks agree (update_fit.h); when
  // fitted, a plan's step ends with its longest update instead of
  // end_step_seconds.
  UpdateFit update;
  // Multiplies the modelled ring seconds of the replicas' gradient
  // all-reduce (runtime_model.h): measured exposed over modelled, 1 when the
  // fitted version had no replicas. Applies fitted or not.
  double allreduce_ring_scale = 1;
  // Bytes/s of every link of that ring as the workers' all-reduce probe
  // measured it, read back alone (FitRingBandwidthFromProbes); 0: the
  // calibrated cluster's links. The scale above applies on top.
  double allreduce_ring_bandwidth = 0;
  // Per operator kind, seconds per modelled second past the fixed part
  // (FitStageKinds), in the units of the cost model it was fitted on; set,
  // it replaces the two scales where the plan's nodes are known.
  std::optional<KindCorrections> kinds;
  // The executor's W runs the backward again (StepSample): a measured W
  // (not I + W) is the full backward, and a schedule that splits I and W
  // is priced with W at the full backward (runtime_model.h).
  bool weight_pass_repeats_backward = false;
};

// `samples` of one plan version (warm-up already dropped) and its planned
// stages (nominal = forward_seconds / time_factor). A stage needs measured F
// and B to count; fewer than two counted stages leave the fit unfitted.
// Actions that do not parse are skipped.
StageTimeFit FitStageTimes(std::span<const StepSample> samples,
                           std::span<const PlannedStage> stages);

// `costs` (computed on the cluster of `fit.cluster_factor`) with each
// stage's F, I and W replaced by the fitted time on `stage_device[s]`. A
// fit that is not fitted changes nothing.
void ApplyStageTimeFit(const StageTimeFit& fit, const std::vector<std::string>& stage_device,
                       schedule::StageCosts& costs);

// Fits `fit.kinds` from the same samples: each counted stage's median F and
// B, less the fixed part, over its device's residual, in the units of
// `cost` (the cluster `fit.cluster_factor` describes; `stage_device`
// indexes it) for the split `node_stage`. Leaves `fit` as it is when it is
// not fitted or the stages do not match the split.
void FitStageKinds(std::span<const StepSample> samples, const CostModel& cost,
                   std::span<const int> node_stage, std::span<const int> stage_device,
                   StageTimeFit& fit, const KindFitOptions& options = {});

// ApplyStageTimeFit where the split is known: with `fit.kinds`, each stage's
// F and B are priced node by node (`costs` is `cost`'s evaluation of the
// split, recomputation applied per `stage_recompute`).
void ApplyStageTimeFit(const StageTimeFit& fit, const CostModel& cost,
                       std::span<const int> node_stage, std::span<const int> stage_device,
                       std::span<const char> stage_recompute, schedule::StageCosts& costs);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_STAGE_TIME_FIT_H_
