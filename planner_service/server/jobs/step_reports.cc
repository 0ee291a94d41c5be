#include "step_reports.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/server/obs/log.h"

namespace pipeplan::server::internal {

absl::Status StepReports::CheckSize(const v1::ReportStepRequest& report,
                                    const JobRegistry::Options& options) {
  if (report.timings_size() > options.max_report_timings) {
    return OverLimit(absl::StrCat("the step report has ", report.timings_size(), " timings"),
                     "max-report-timings", options.max_report_timings);
  }
  if (const int64_t bytes = static_cast<int64_t>(report.ByteSizeLong());
      bytes > options.max_report_bytes) {
    return OverLimit(absl::StrCat("the step report has ", bytes, " bytes"), "max-report-bytes",
                     options.max_report_bytes);
  }
  return absl::OkStatus();
}

namespace {

// A pool the planner cannot model (no name, no CPUs, no threads) is a
// worker bug: refused, not silently left out of the calibration.
absl::Status CheckCpuUse(const v1::ReportStepRequest& report) {
  if (!report.has_cpu_use()) return absl::OkStatus();
  const v1::CpuUse& c = report.cpu_use();
  if (c.pool().empty()) return absl::InvalidArgumentError("cpu_use.pool must be set");
  if (c.cpus() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cpu_use.cpus must be >= 1, got ", c.cpus()));
  }
  if (c.threads() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_use.threads must be >= 1, got ", c.threads()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepReports::Admitted> StepReports::Admit(Job& job, Worker& w,
                                                         const v1::ReportStepRequest& report) {
  // A report of an older version is a step that really ran (the last one
  // before a switch, whose loss the user wants to see): it is kept, and the
  // answer's current_plan_version tells the worker to switch. Calibration
  // reads only the current version's reports. A version the job never had
  // is an error.
  if (report.plan_version() > job.record.current_version || report.plan_version() < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "report for plan version ", report.plan_version(), " but job ", report.job_id(),
        " is at version ", job.record.current_version, "; switch plans and report again"));
  }
  if (report.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step must be >= 0, got ", report.step()));
  }
  PIPEPLAN_RETURN_IF_ERROR(CheckCpuUse(report));
  Admitted out;
  out.response.set_current_plan_version(job.record.current_version);
  if (!report.run_id().empty() && report.run_id() == w.report_run_id &&
      report.seq() <= w.report_seq) {
    out.store = false;  // stored already; the worker did not see the answer
    return out;
  }
  if (w.record.state == v1::WORKER_LOST) {
    PIPEPLAN_RETURN_IF_ERROR(leases_->Revive(w, ctx_->clock->Now()));
  }
  if (job.record.state == v1::JOB_PENDING) {
    PIPEPLAN_RETURN_IF_ERROR(
        StoreJobState(*ctx_, job.record.id, v1::JOB_RUNNING, job.record.failure_message));
    job.record.state = v1::JOB_RUNNING;
    LogInfo("job_state", {{"job", job.record.id}, {"state", "JOB_RUNNING"}});
  }
  return out;
}

void StepReports::Record(Worker& w, const v1::ReportStepRequest& report) {
  const absl::Time now = ctx_->clock->Now();
  w.lease_expiry = now + ctx_->options.lease;
  w.record.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  w.record.last_step = std::max(w.record.last_step, report.step());
  w.report_run_id = report.run_id();
  w.report_seq = report.seq();
}

void StepReports::RecordShared(Worker& w, const v1::ReportStepRequest& report) {
  const absl::Time now = ctx_->clock->Now();
  w.lease_expiry = now + ctx_->options.lease;
  w.record.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  w.record.last_step = std::max(w.record.last_step, report.step());
  if (report.run_id() != w.report_run_id) w.report_seq = 0;
  w.report_run_id = report.run_id();
  w.report_seq = std::max(w.report_seq, report.seq());
}

}  // namespace pipeplan::server::internal
