#include "pipeplan/server/replan/job_observer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "calibrated_model.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/convert/report_convert.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/runtime_model.h"
#include "pipeplan/core/step_spread.h"
#include "pipeplan/server/replan/measured_steps.h"
#include "pipeplan/server/replan/version_prediction.h"

namespace pipeplan::server {
namespace {

// What the model fitted: device factors, links and host times per message.
void AddFitted(const CalibratedModel& model, v1::JobObservation* out) {
  if (model.estimate.ok()) {
    for (const DeviceFactor& f : model.estimate->devices) {
      v1::DeviceFactor* p = out->add_devices();
      p->set_device_id(f.device_id);
      p->set_time_factor(f.time_factor);
      p->set_samples(f.samples);
    }
  }
  for (const FittedLink& l : model.links.links) *out->add_links() = LinkFitToProto(l);
  for (const auto& [device, fit] : model.host.devices) {
    v1::HostTimeFit* h = out->add_host_times();
    h->set_device_id(device);
    h->set_send_seconds(model.host.SendSeconds(device));
    h->set_recv_seconds(model.host.RecvSeconds(device));
    h->set_send_samples(fit.send.samples);
    h->set_recv_samples(fit.recv.samples);
  }
}

// The out-of-sample check: the prediction stored with the version before
// it ran, against its measured steps (and their quantiles).
void AddOutOfSample(const v1::VersionedPlan& vp, const std::vector<StepSample>& samples,
                    int num_ranks, v1::JobObservation* out) {
  const std::vector<double> steps = StepMakespans(samples, num_ranks);
  out->set_measured_p50_step_seconds(QuantileOr(steps, 0.5, 0));
  out->set_measured_p90_step_seconds(QuantileOr(steps, 0.9, 0));
  const double predicted = vp.prediction().step_seconds();
  if (!(predicted > 0)) return;
  out->set_out_of_sample_step_seconds(predicted);
  out->set_out_of_sample_error_ratio(PredictionError(predicted, out->measured_step_seconds()));
}

}  // namespace

absl::StatusOr<v1::JobObservation> ObserveJob(const JobRegistry& registry,
                                              const std::string& job_id,
                                              const ObserverOptions& options) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, registry.GetPlan(job_id, 0));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, registry.GetJob(job_id));
  absl::StatusOr<DecodedPlan> plan = DecodePlan(vp.plan());
  if (!plan.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read plan version ", vp.version(), ": ", plan.status().message()));
  }
  v1::JobObservation out;
  out.set_plan_version(vp.version());
  out.set_planned_step_seconds(vp.plan().step_seconds());
  PIPEPLAN_ASSIGN_OR_RETURN(CalibratedModel model,
                            BuildCalibratedModel(registry, job, vp, *plan,
                                                 {.report_window = options.report_window,
                                                  .warmup_steps = options.warmup_steps,
                                                  .min_device_samples = options.min_device_samples,
                                                  .links = options.links,
                                                  .host = options.host}));
  AddMeasuredSteps(model.samples, vp.plan(), plan->num_ranks, &out);
  AddFitted(model, &out);
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest request, CalibratedRequest(vp.request(), model, {}));
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, PlanInputs::FromRequest(request, options.limits));
  PIPEPLAN_ASSIGN_OR_RETURN(FixedPlan fixed, FixedPlanOf(*plan, *in.cluster, in.options));
  PIPEPLAN_ASSIGN_OR_RETURN(
      AsRunResult predicted,
      SimulateAsRun(*in.graph, *in.cluster, fixed,
                    {.shipped_bytes = ShippedBytes(model.samples, plan->num_stages()),
                     .host_overhead = model.host,
                     .stage_fit = &model.stage_fit,
                     .cpu_pools = &model.cpu_pools}));
  out.set_predicted_step_seconds(predicted.simulation.step_seconds);
  out.set_predicted_bubble_ratio(predicted.simulation.bubble_ratio);
  AddOutOfSample(vp, model.samples, plan->num_ranks, &out);
  if (out.measured_step_seconds() > 0) {
    out.set_prediction_error_ratio(
        std::abs(out.predicted_step_seconds() - out.measured_step_seconds()) /
        out.measured_step_seconds());
  }
  return out;
}

Metrics::JobFigures JobFiguresOf(const v1::JobObservation& o) {
  return {.measured_step_seconds = o.steps() > 0 ? o.measured_step_seconds() : 0,
          .measured_bubble_ratio = o.measured_bubble_ratio(),
          .predicted_step_seconds = o.predicted_step_seconds(),
          .predicted_bubble_ratio = o.predicted_bubble_ratio(),
          .prediction_error_ratio = o.prediction_error_ratio(),
          .replan_prediction_error = o.steps() > 0 && o.out_of_sample_step_seconds() > 0
                                         ? o.out_of_sample_error_ratio()
                                         : -1};
}

}  // namespace pipeplan::server
