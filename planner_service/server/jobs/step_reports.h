// Step-report ingestion: a report is bounded in size, must name a plan
// version the job had, is stored once (a resend — same run, number not
// above the last stored — is answered OK and dropped), renews the worker's
// lease, brings a lost worker back and moves a PENDING job to RUNNING.
//
// Thread safety: none; JobRegistry calls it under its lock (job_table.h).
// On a shared store JobRegistry stores the report with the lock released;
// Admit and Record are the parts before and after.
#ifndef PIPEPLAN_SERVER_JOBS_STEP_REPORTS_H_
#define PIPEPLAN_SERVER_JOBS_STEP_REPORTS_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job_table.h"
#include "replication_sync.h"
#include "worker_leases.h"

namespace pipeplan::server::internal {

class StepReports {
 public:
  StepReports(const RegistryContext* ctx, WorkerLeases* leases) : ctx_(ctx), leases_(leases) {}

  // RESOURCE_EXHAUSTED for a report over max_report_timings or
  // max_report_bytes.
  static absl::Status CheckSize(const v1::ReportStepRequest& report,
                                const JobRegistry::Options& options);
  // Checks `report` against `job` (already caught up with the store) and
  // prepares `w` and the job for it. The answer, and whether the report is
  // to be stored (false: a resend already stored).
  struct Admitted {
    v1::ReportStepResponse response;
    bool store = true;
  };
  absl::StatusOr<Admitted> Admit(Job& job, Worker& w, const v1::ReportStepRequest& report);
  // After the report was stored: the lease, last step and report number.
  void Record(Worker& w, const v1::ReportStepRequest& report);
  // The same, replicated: another report may have been recorded meanwhile.
  void RecordShared(Worker& w, const v1::ReportStepRequest& report);

 private:
  const RegistryContext* const ctx_;
  WorkerLeases* const leases_;
};

}  // namespace pipeplan::server::internal

#endif  // PIPEPLAN_SERVER_JOBS_STEP_REPORTS_H_
