// A job's cost model calibrated from its workers' step reports, built in
// one place (BuildCalibratedModel) for the replan policy, which plans and
// scores under it, and the job observer, which predicts the running plan
// under it: per-device compute factors (calibration.h) over the plan's own,
// links fitted from paired transfers (link_calibration.h) over the plan's
// recorded fits, and each device's host time per message (host_overhead.h),
// applied to the job's request.
//
// Only reports of one plan version are read; each worker's first
// `warmup_steps` steps in the window are skipped.
//
// Thread safety: the functions are reentrant (the registry is thread-safe).
#ifndef PIPEPLAN_SERVER_REPLAN_CALIBRATED_MODEL_H_
#define PIPEPLAN_SERVER_REPLAN_CALIBRATED_MODEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/cpu_pools.h"
#include "pipeplan/core/host_overhead.h"
#include "pipeplan/core/link_calibration.h"
#include "pipeplan/core/runtime_model.h"
#include "pipeplan/core/stage_time_fit.h"
#include "pipeplan/core/step_spread.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

// Step reports one calibration or observation reads, at most (serialized
// bytes), whatever the reports' sizes.
inline constexpr int64_t kMaxSampleBytes = int64_t{64} << 20;

// The job's reports of plan `version` with their workers' devices, oldest
// first, at most `window` and kMaxSampleBytes read.
absl::StatusOr<std::vector<StepSample>> ReportSamples(const JobRegistry& registry,
                                                      const v1::Job& job, int64_t version,
                                                      int window);

// Drops each worker's first `warmup_steps` steps of `samples`.
std::vector<StepSample> AfterWarmup(std::vector<StepSample> samples, int warmup_steps);

// Links fitted from the samples' paired transfers, over `prior` (the plan's
// own fits): a fresh fit replaces the prior one of the same pair or class.
LinkCalibration CalibrateLinks(const std::vector<StepSample>& samples, const ClusterSpec& nominal,
                               const LinkCalibration& prior, const LinkFitOptions& options = {});

// The plan's recorded link fits (Plan.calibration.links); unreadable ones are
// skipped.
LinkCalibration PlanLinks(const v1::Plan& plan);

// The request with the calibrated cluster: flops divided by the factors
// (devices without one get `default_factor`), `excluded` devices (and their
// links) removed, fitted links applied, measured node seconds rescaled to
// the new fastest device. The options stay as requested.
absl::StatusOr<v1::PlanRequest> CalibratedRequest(const v1::PlanRequest& nominal,
                                                  const std::map<std::string, double>& factors,
                                                  double default_factor,
                                                  const std::vector<std::string>& excluded,
                                                  const LinkCalibration& links = {});

// The factors a model plans with: the plan's own, updated by the estimate;
// devices with neither get `default_factor` (the estimate's median, else
// the median of the plan's own, else 1).
struct DeviceFactors {
  std::map<std::string, double> by_device;
  std::map<std::string, int> samples;
  double default_factor = 1;
};
DeviceFactors MergeFactors(const std::map<std::string, double>& prior,
                           const CalibrationResult& estimate);

struct CalibratedModelOptions {
  int report_window = 2'000;
  int warmup_steps = 1;
  // Reports per device before its factor counts (at least 1).
  int min_device_samples = 1;
  LinkFitOptions links;
  HostOverheadOptions host;
};

// The model of one plan version.
struct CalibratedModel {
  // The version's samples after the warm-up.
  std::vector<StepSample> samples;
  // The factor estimate; an error when the reports do not match the plan
  // (then `factors` are the plan's own).
  absl::StatusOr<CalibrationResult> estimate = CalibrationResult{};
  DeviceFactors factors;
  LinkCalibration links;
  HostOverhead host;
  // Each action kind's step-to-step spread per device (step_spread.h);
  // empty when the reports do not parse.
  ActionSpread spread;
  // Stage times as the executor measured them (stage_time_fit.h), over the
  // cluster calibrated with `factors`: what plans are scored with.
  StageTimeFit stage_fit;
  // CPU workers sharing a machine's cores (cpu_pools.h); the samples'
  // compute seconds above are their seconds alone on their pool.
  CpuPools cpu_pools;
};

// Reads `job`'s reports of `version` (the plan `plan`, decoded from it; an
// empty one when it cannot be read) and fits the model on them.
absl::StatusOr<CalibratedModel> BuildCalibratedModel(const JobRegistry& registry,
                                                     const v1::Job& job,
                                                     const v1::VersionedPlan& version,
                                                     const DecodedPlan& plan,
                                                     const CalibratedModelOptions& options);

// The version's request under the model, without the `excluded` devices.
absl::StatusOr<v1::PlanRequest> CalibratedRequest(const v1::PlanRequest& nominal,
                                                  const CalibratedModel& model,
                                                  const std::vector<std::string>& excluded);

// Median bytes the workers shipped per boundary (SEND_F of stage b), 0 where
// none was reported; sized num_stages - 1.
std::vector<double> ShippedBytes(const std::vector<StepSample>& samples, int num_stages);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_CALIBRATED_MODEL_H_
