#include "step_report.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "pipeplan/core/schedule/action.h"
#include "retryable.h"

namespace pipeplan::worker {

double BubbleRatio(const StepResult& result) {
  if (!(result.step_seconds > 0)) return 0;
  return std::clamp(1 - result.compute_seconds / result.step_seconds, 0.0, 1.0);
}

v1::ReportStepRequest MakeStepReport(const WorkerOptions& options, int64_t version,
                                     const StepResult& result, double peak_memory_bytes,
                                     std::optional<double> loss) {
  v1::ReportStepRequest report;
  report.set_job_id(options.job_id);
  report.set_worker_id(options.worker_id);
  report.set_step(result.step);
  report.set_plan_version(version);
  report.set_step_seconds(result.step_seconds);
  report.set_peak_memory_bytes(peak_memory_bytes);
  if (loss) report.set_loss(*loss);
  report.set_rank(result.rank);
  report.set_start_unix_us(result.start_unix_us);
  report.set_compute_seconds(result.compute_seconds);
  report.set_comm_seconds(result.comm_seconds);
  report.set_bubble_ratio(BubbleRatio(result));
  for (const ActionTime& t : result.timings) {
    v1::ActionTiming* at = report.add_timings();
    at->set_action(schedule::ActionToString(t.action));
    at->set_seconds(t.seconds);
    at->set_start_seconds(t.start_seconds);
    if (t.post_unix_us == 0) continue;  // compute: no transfer fields
    at->set_bytes(t.bytes);
    at->set_peer_rank(t.peer_rank);
    at->set_post_unix_us(t.post_unix_us);
    at->set_complete_unix_us(t.complete_unix_us);
    at->set_wait_seconds(t.wait_seconds);
  }
  return report;
}

std::string SendStepReport(client::PlannerClient& planner, const WorkerOptions& options,
                           ControlState& state, const v1::ReportStepRequest& report) {
  std::string result = "ok";
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<v1::ReportStepResponse> resp = planner.ReportStep(report);
    if (resp.ok()) {
      state.SawVersion(resp->current_plan_version());
      break;
    }
    result = std::string(absl::StatusCodeToString(resp.status().code()));
    if (resp.status().code() == absl::StatusCode::kFailedPrecondition) {
      // Stale version: learn the current one; the next boundary switches.
      // (Not registered: Heartbeat fails alike and the heartbeat thread
      // registers again.)
      absl::StatusOr<v1::HeartbeatResponse> hb =
          planner.Heartbeat(options.job_id, options.worker_id);
      if (hb.ok()) state.SawVersion(hb->current_plan_version());
      break;
    }
    if (!Retryable(resp.status())) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return result;
}

}  // namespace pipeplan::worker
