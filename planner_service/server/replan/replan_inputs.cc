#include "replan_inputs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/report_convert.h"
#include "pipeplan/core/runtime_model.h"
#include "pipeplan/core/step_spread.h"

namespace pipeplan::server {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

absl::StatusOr<PlanInputs> CalibratedInputs(const v1::PlanRequest& request,
                                            const CalibratedModel& model, const LostDevices& lost,
                                            const ReplanPolicyOptions& options) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest calibrated,
                            CalibratedRequest(request, model, lost.devices));
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, PlanInputs::FromRequest(calibrated, options.limits));
  FitToDevices(in);
  const double limit = in.options.time_limit_seconds > 0 ? in.options.time_limit_seconds : 10.0;
  in.options.time_limit_seconds = std::max(0.01, std::min(limit, options.max_solve_seconds));
  return in;
}

absl::StatusOr<double> ScoreUnder(const DecodedPlan& plan, bool readable, const PlanInputs& in,
                                  const CalibratedModel& model) {
  if (!readable) return kInf;
  absl::StatusOr<FixedPlan> fixed = FixedPlanOf(plan, *in.cluster, in.options);
  if (!fixed.ok() && fixed.status().code() == absl::StatusCode::kNotFound) return kInf;
  PIPEPLAN_RETURN_IF_ERROR(fixed.status());
  // The expected step under the measured spread (step_spread.h): under
  // noise a plan with more waits between ranks is slower than its mean.
  PIPEPLAN_ASSIGN_OR_RETURN(StepQuantiles score, SimulateSpread(*in.graph, *in.cluster, *fixed,
                                                                {.host_overhead = model.host,
                                                                 .stage_fit = &model.stage_fit,
                                                                 .cpu_pools = &model.cpu_pools},
                                                                model.spread));
  return score.mean_seconds;
}

double AsRunStep(const v1::Plan& plan, double solver_step, const PlanInputs& in,
                 const CalibratedModel& model) {
  absl::StatusOr<DecodedPlan> decoded = DecodePlan(plan);
  if (!decoded.ok()) return solver_step;
  absl::StatusOr<double> as_run = ScoreUnder(*decoded, true, in, model);
  return as_run.ok() ? *as_run : solver_step;
}

v1::Plan WithCalibration(v1::Plan next, const Cluster& cluster, const CalibratedModel& model,
                         const LostDevices& lost, const ReplanOutcome& outcome) {
  const DeviceFactors& factors = model.factors;
  v1::PlanCalibration* cal = next.mutable_calibration();
  for (const FittedLink& l : model.links.links) *cal->add_links() = LinkFitToProto(l);
  for (int d = 0; d < cluster.num_devices(); ++d) {
    const std::string& id = cluster.device(d).id;
    v1::DeviceFactor* f = cal->add_devices();
    f->set_device_id(id);
    auto it = factors.by_device.find(id);
    f->set_time_factor(it == factors.by_device.end() ? factors.default_factor : it->second);
    auto samples = factors.samples.find(id);
    f->set_samples(samples == factors.samples.end() ? 0 : samples->second);
  }
  for (const std::string& d : lost.devices) cal->add_excluded_devices(d);
  const double cur = outcome.current_step_seconds;
  cal->set_previous_step_seconds(std::isinf(cur) ? 0 : cur);
  cal->set_step_seconds(outcome.new_step_seconds);
  return next;
}

}  // namespace pipeplan::server
