#include "step_report.h"

#include "pipeplan/core/schedule/action.h"

namespace pipeplan::worker {

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
  for (const ActionTime& t : result.timings) {
    v1::ActionTiming* at = report.add_timings();
    at->set_action(schedule::ActionToString(t.action));
    at->set_seconds(t.seconds);
  }
  return report;
}

}  // namespace pipeplan::worker
