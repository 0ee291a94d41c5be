// Which errors of a step, a vote or a switch a new plan version (or the same
// one, rebuilt) fixes: a peer that died or hung. Decided by code only; a job
// failure (job_failure.h) never is one. Whether a planner call is worth
// repeating is the one retry policy's question (pipeplan/common/retry_policy.h).
#ifndef PIPEPLAN_WORKER_ENV_PEER_FAILURE_H_
#define PIPEPLAN_WORKER_ENV_PEER_FAILURE_H_

#include "absl/status/status.h"
#include "pipeplan/worker/env/job_failure.h"

namespace pipeplan::worker {

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

#endif  // PIPEPLAN_WORKER_ENV_PEER_FAILURE_H_
