#include "step_loop.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "event_log.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/core/status_macros.h"
#include "step_report.h"

namespace pipeplan::worker {

StepLoop::StepLoop(client::PlannerClient& planner, const WorkerOptions& options,
                   ControlState& state, const std::atomic<bool>& stop, WorkerMetrics* metrics)
    : planner_(planner),
      options_(options),
      state_(state),
      stop_(stop),
      metrics_(metrics),
      kv_(&planner, options.job_id) {}

absl::Status StepLoop::Run() {
  while (true) {
    const bool connected = active_ && active_->connected();
    if (stop_.load() && !connected) return absl::OkStatus();
    if (state_.JobDeleted()) {
      return absl::NotFoundError(absl::StrCat("job ", options_.job_id, " was deleted"));
    }
    if (options_.steps > 0 && step_ >= options_.steps) return absl::OkStatus();
    int64_t want = state_.Latest();
    if (connected) {
      PIPEPLAN_ASSIGN_OR_RETURN(const Boundary boundary, AgreeAtBoundary(want));
      if (boundary.stop) {
        Emit(absl::StrCat("event=stop job=", options_.job_id, " worker=", options_.worker_id,
                          " step=", step_));
        return absl::OkStatus();
      }
      want = boundary.version;
    }
    if (!active_ || active_->version != want) {
      PIPEPLAN_RETURN_IF_ERROR(SwitchTo(want));
      continue;  // agree again on the new transport before running
    }
    PIPEPLAN_RETURN_IF_ERROR(RunOneStep());
  }
}

absl::StatusOr<StepLoop::Boundary> StepLoop::AgreeAtBoundary(int64_t known_version) {
  Transport& transport = *active_->transport;
  absl::StatusOr<int64_t> agreed = transport.AllReduceMax(known_version, options_.comm_timeout);
  if (!agreed.ok()) {
    return absl::Status(agreed.status().code(),
                        absl::StrCat("agreeing on the plan version at step ", step_, ": ",
                                     agreed.status().message()));
  }
  state_.SawVersion(*agreed);
  // A stop (SIGTERM) on any rank stops every rank at this boundary.
  PIPEPLAN_ASSIGN_OR_RETURN(const int64_t stop_vote,
                            transport.AllReduceMax(stop_.load() ? 1 : 0, options_.comm_timeout));
  return Boundary{.version = *agreed, .stop = stop_vote != 0};
}

absl::Status StepLoop::SwitchTo(int64_t version) {
  const int64_t from = active_ ? active_->version : 0;
  active_.reset();
  absl::StatusOr<std::unique_ptr<ActivePlan>> next =
      BuildActivePlan(planner_, kv_, options_, version);
  if (!next.ok()) {
    return absl::Status(next.status().code(), absl::StrCat("switching to plan version ", version,
                                                           ": ", next.status().message()));
  }
  active_ = std::move(*next);
  if (metrics_) metrics_->SetPlanVersion(version);
  const StagePlan& plan = active_->plan;
  Emit(absl::StrCat(
      "event=plan_switch job=", options_.job_id, " worker=", options_.worker_id,
      " from_version=", from, " plan_version=", version, " rank=", active_->rank,
      " ranks=", plan.ranks, " stages=", plan.num_stages, " microbatches=", plan.microbatches,
      " schedule=", std::string(schedule::ScheduleKindName(plan.kind)), " step=", step_));
  if (active_->rank < 0) {
    WaitForVersionAfter(version);
    active_.reset();
  }
  return absl::OkStatus();
}

void StepLoop::WaitForVersionAfter(int64_t version) {
  while (!stop_.load() && !state_.JobDeleted() && state_.Latest() <= version) {
    if (state_.SleepOrShutdown(absl::Milliseconds(100))) break;
  }
}

absl::Status StepLoop::RunOneStep() {
  PIPEPLAN_ASSIGN_OR_RETURN(
      const StepResult r,
      active_->runtime->RunStep(step_, *active_->transport, *active_->executor));
  const std::string report_result = SendStepReport(
      planner_, options_, state_,
      MakeStepReport(options_, active_->version, r, active_->executor->PeakMemoryBytes()));
  const std::optional<double> loss = active_->executor->LastLoss();
  if (metrics_) {
    metrics_->ObserveStep(r.step_seconds);
    if (loss) metrics_->SetLoss(*loss);
  }
  Emit(absl::StrCat("event=step job=", options_.job_id, " worker=", options_.worker_id,
                    " step=", step_, " plan_version=", active_->version, " rank=", active_->rank,
                    " seconds=", r.step_seconds, " report=", report_result,
                    loss ? absl::StrCat(" loss=", *loss) : std::string()));
  ++step_;
  return absl::OkStatus();
}

}  // namespace pipeplan::worker
