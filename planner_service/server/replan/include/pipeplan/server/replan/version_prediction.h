// The out-of-sample check of a replan: what version N+1 is predicted to
// take under version N's calibration, stored with N+1 before it is
// published (VersionedPlan.prediction), and what it then measured.
//
// Calibration is scored in sample by the job observer (the running plan
// under its own reports). A replan decision rests on another number: the
// step of a plan that has not run yet. PredictVersion computes it (as run,
// with the measured spread of each action kind per device: p50 and p90 too)
// together with the replaced version's prediction and measurement under
// the same model, so that once N+1 runs, its measured steps can be compared
// with a prediction made before it existed: the observer's
// out_of_sample_error_ratio, the gauge pipeplan_replan_prediction_error and
// `pipeplan jobs versions`.
//
// Thread safety: reentrant.
#ifndef PIPEPLAN_SERVER_REPLAN_VERSION_PREDICTION_H_
#define PIPEPLAN_SERVER_REPLAN_VERSION_PREDICTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/host_overhead.h"
#include "pipeplan/core/stage_time_fit.h"
#include "pipeplan/core/step_spread.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

// The makespan of each step every one of `num_ranks` ranks reported (first
// rank's start to last rank's end; the longest rank for reports without
// wall-clock starts), in step order.
std::vector<double> StepMakespans(const std::vector<StepSample>& samples, int num_ranks);

// What the replaced version `current` measured and how its model scores
// plans: the model's samples (after warm-up), host times and spread.
struct PredictionBasis {
  int64_t current_version = 0;
  const DecodedPlan* current = nullptr;  // null: unreadable
  const std::vector<StepSample>* samples = nullptr;
  const HostOverhead* host = nullptr;
  const StageTimeFit* stage_fit = nullptr;
  const CpuPools* cpu_pools = nullptr;
  ActionSpread spread;
  std::string trigger;
  double switch_seconds = 0;
  int horizon_steps = 0;
};

// The prediction of `next` under `in` (the calibrated request's inputs),
// with the basis' measured figures. Errors: `next` does not decode or
// cannot be simulated on `in`'s cluster.
absl::StatusOr<v1::VersionPrediction> PredictVersion(const v1::Plan& next, const PlanInputs& in,
                                                     const PredictionBasis& basis);

// For a replan by hand (ReplanJob): the basis and calibrated inputs built
// from the job's current version and reports (`warmup_steps` skipped), and
// the prediction of `next`, planned for `request` (the new options). Errors:
// the registry's, or the prediction's.
absl::StatusOr<v1::VersionPrediction> PredictFromCurrent(
    const JobRegistry& registry, const std::string& job_id, const v1::PlanRequest& request,
    const v1::Plan& next, const std::vector<std::string>& excluded, int warmup_steps,
    const GraphLimits& limits);

// |predicted - measured| / measured; 0 when either is not positive.
double PredictionError(double predicted, double measured);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_VERSION_PREDICTION_H_
