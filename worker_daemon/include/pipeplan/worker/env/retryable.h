// Which errors a worker outlives. Retryable: planner answers worth the same
// call again (the planner is restarting or draining, its store cannot write
// right now, or the call ran out of time). PeerFailure: errors of a step, a
// vote or a switch that a new plan version (or the same one, rebuilt) fixes:
// a peer that died or hung. Decided by code only. Internal to
// libpipeplan_worker.
#ifndef PIPEPLAN_WORKER_SRC_RETRYABLE_H_
#define PIPEPLAN_WORKER_SRC_RETRYABLE_H_

#include "absl/status/status.h"
#include "pipeplan/worker/env/job_failure.h"

namespace pipeplan::worker {

inline bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded ||
         s.code() == absl::StatusCode::kResourceExhausted;
}

inline bool PeerFailure(const absl::Status& s) {
  if (IsJobFailure(s)) return false;
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_RETRYABLE_H_
