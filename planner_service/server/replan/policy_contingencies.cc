// ReplanPolicy's contingency plans (contingency_plans.h): when a version is
// due for them, and computing them on the solve pool, off the RPC path and
// beside (never in front of) an evaluation of a loss.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "calibrated_model.h"
#include "contingency_plans.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/replan/live_devices.h"
#include "pipeplan/server/replan/replan_policy.h"
#include "replan_inputs.h"

namespace pipeplan::server {

bool ReplanPolicy::ContingenciesDue(const v1::Job& job, JobState& st, absl::Time now) const {
  if (!options_.contingencies || options_.max_contingencies <= 0 || st.contingency_in_flight) {
    return false;
  }
  if (st.contingency_version == job.plan_version() &&
      now - st.contingency_at < options_.contingency_refresh) {
    return false;
  }
  // The version runs on every rank: its reports start to calibrate it, and
  // a version that is switched away from at once is not planned around.
  bool ranked = false;
  for (const v1::WorkerStatus& w : job.workers()) {
    if (w.rank() < 0 || w.state() != v1::WORKER_ACTIVE) continue;
    ranked = true;
    // A worker that registered after the version was first seen counts
    // from its first look here (with --replan=membership nothing else
    // records it).
    auto [it, inserted] = st.baseline_step.emplace(w.info().worker_id(), w.last_step());
    if (w.last_step() - it->second < options_.warmup_steps + 2) return false;
  }
  return ranked;
}

bool ReplanPolicy::SubmitContingencies(const std::string& id) {
  absl::Status admitted = pool_->Submit([this, id] {
    absl::StatusOr<int> stored = ComputeContingencies(id);
    const absl::StatusCode code = stored.status().code();
    if (!stored.ok() && code != absl::StatusCode::kNotFound && code != absl::StatusCode::kAborted) {
      LogWarn("contingency_error",
              {{"job", id}, {"error", std::string(stored.status().message())}});
    }
    absl::MutexLock lock(&mu_);
    if (auto it = jobs_.find(id); it != jobs_.end()) it->second.contingency_in_flight = false;
  });
  return admitted.ok();
}

namespace {

// The plan a loss of `lost` would publish under `model` (Replan's solve).
// A refresh keeps the version's earlier contingency for that loss while it
// still fits (the workers may have compiled its stages already), so a
// split changes only when the calibration moved it.
absl::StatusOr<v1::ContingencyPlan> PlanForLoss(const v1::VersionedPlan& vp,
                                                const CalibratedModel& model,
                                                const std::vector<std::string>& lost,
                                                const ReplanPolicyOptions& options) {
  const LostDevices gone{.devices = lost};
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, CalibratedInputs(vp.request(), model, gone, options));
  PIPEPLAN_ASSIGN_OR_RETURN(PlanResult result, MakePlan(*in.graph, *in.cluster, in.options));
  ReplanOutcome outcome{.current_step_seconds = std::numeric_limits<double>::infinity()};
  v1::Plan plan = PlanToProto(*in.graph, *in.cluster, result);
  outcome.new_step_seconds = AsRunStep(plan, result.step_seconds, in, model);
  const v1::ContingencyPlan* earlier = FindContingency(vp, lost);
  if (earlier != nullptr &&
      ContingencyStillFits(
          AsRunStep(earlier->plan(), std::numeric_limits<double>::infinity(), in, model),
          outcome.new_step_seconds, options.contingency_slack)) {
    return *earlier;
  }
  v1::ContingencyPlan out;
  for (const std::string& d : lost) out.add_lost_devices(d);
  *out.mutable_plan() = WithCalibration(std::move(plan), *in.cluster, model, gone, outcome);
  return out;
}

}  // namespace

absl::StatusOr<int> ReplanPolicy::ComputeContingencies(const std::string& job_id) {
  const absl::Time start = absl::Now();
  PIPEPLAN_ASSIGN_OR_RETURN(const v1::VersionedPlan vp, registry_->GetPlan(job_id, 0));
  PIPEPLAN_ASSIGN_OR_RETURN(const v1::Job job, registry_->GetJob(job_id));
  PIPEPLAN_ASSIGN_OR_RETURN(const DecodedPlan current, DecodePlan(vp.plan()));
  PIPEPLAN_ASSIGN_OR_RETURN(const CalibratedModel model,
                            BuildCalibratedModel(*registry_, job, vp, current,
                                                 {.report_window = options_.report_window,
                                                  .warmup_steps = options_.warmup_steps,
                                                  .min_device_samples = options_.min_steps}));
  PIPEPLAN_ASSIGN_OR_RETURN(std::shared_ptr<MemoryBudget::Reservation> memory,
                            ReserveMemory(vp.request()));
  ReplanPolicyOptions solve = options_;
  solve.max_solve_seconds =
      std::min(options_.max_solve_seconds, options_.contingency_solve_seconds);
  const LostDevices lost = FindLostDevices(job, vp.request().cluster());
  std::vector<v1::ContingencyPlan> plans;
  for (const std::vector<std::string>& loss : ContingencyLossSets(
           current, vp.request().cluster(), lost.devices, options_.max_contingencies)) {
    absl::StatusOr<v1::ContingencyPlan> plan = PlanForLoss(vp, model, loss, solve);
    // No plan fits that loss: it replans (and fails) as before.
    if (plan.ok()) plans.push_back(*std::move(plan));
  }
  const int count = static_cast<int>(plans.size());
  // A refresh that kept every plan changes nothing a worker compiles: no
  // line every 10 s for a job that runs steadily.
  int kept = 0;
  for (const v1::ContingencyPlan& c : plans) {
    const v1::ContingencyPlan* earlier =
        FindContingency(vp, {c.lost_devices().begin(), c.lost_devices().end()});
    kept += earlier != nullptr && earlier->SerializeAsString() == c.SerializeAsString();
  }
  PIPEPLAN_RETURN_IF_ERROR(registry_->SetContingencies(job_id, vp.version(), std::move(plans)));
  if (kept == count && vp.contingencies_size() == count) return count;
  LogInfo("contingencies_planned",
          {{"job", job_id},
           {"plan_version", absl::StrCat(vp.version())},
           {"plans", absl::StrCat(count)},
           {"kept", absl::StrCat(kept)},
           {"seconds", absl::StrCat(absl::ToDoubleSeconds(absl::Now() - start))}});
  return count;
}

}  // namespace pipeplan::server
