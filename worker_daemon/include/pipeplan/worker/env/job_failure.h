// The mark a status carries when the job itself failed (the worker said so
// with FinishWorker): a bad model package or data, a diverged loss, or a job
// that had already failed. Restarting the worker cannot help; the daemon
// exits 5 (systemd: RestartPreventExitStatus). Every part of the worker that
// decides whether an error is final reads it, so it sits below them all.
#ifndef PIPEPLAN_WORKER_ENV_JOB_FAILURE_H_
#define PIPEPLAN_WORKER_ENV_JOB_FAILURE_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace pipeplan::worker {

inline constexpr char kJobFailedPayload[] = "type.googleapis.com/pipeplan.worker.JobFailed";
inline absl::Status JobFailure(absl::Status status) {
  status.SetPayload(kJobFailedPayload, absl::Cord("1"));
  return status;
}
inline bool IsJobFailure(const absl::Status& status) {
  return status.GetPayload(kJobFailedPayload).has_value();
}

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_ENV_JOB_FAILURE_H_
