#include "pipeplan/worker/report/step_report.h"

#include <algorithm>

#include "pipeplan/core/schedule/action.h"

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
  report.set_optimizer_seconds(result.optimizer_seconds);
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

}  // namespace pipeplan::worker
