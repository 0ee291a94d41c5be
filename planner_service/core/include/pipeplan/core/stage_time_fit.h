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
// The end of a step, after the last compute (the executor's EndStep:
// optimizer update, gradient clipping, loss reduction), is measured too: the
// least time any rank spent in it (the rank that arrived last did not wait
// for the others), median over steps.
//
// Pure; no I/O.
#ifndef PIPEPLAN_CORE_STAGE_TIME_FIT_H_
#define PIPEPLAN_CORE_STAGE_TIME_FIT_H_

#include <map>
#include <span>
#include <string>
#include <vector>

#include "pipeplan/core/calibration.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan {

struct StageTimeFit {
  bool fitted = false;
  double forward_fixed = 0, forward_scale = 1;
  double backward_fixed = 0, backward_scale = 1;
  // Device id -> residual factor (1 for a device without one).
  std::map<std::string, double> device_factor;
  // The factor each device's flops were divided by in the cluster the
  // costs are computed on (divided out again to get nominal seconds), and
  // the one for devices not listed.
  std::map<std::string, double> cluster_factor;
  double cluster_default_factor = 1;
  // Seconds after the last compute of a step (EndStep), 0 if not measured.
  double end_step_seconds = 0;
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

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_STAGE_TIME_FIT_H_
