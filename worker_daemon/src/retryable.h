// Which planner answers a worker retries: the planner is restarting or
// draining (UNAVAILABLE), or the call ran out of time. Internal to
// libpipeplan_worker.
#ifndef PIPEPLAN_WORKER_SRC_RETRYABLE_H_
#define PIPEPLAN_WORKER_SRC_RETRYABLE_H_

#include "absl/status/status.h"

namespace pipeplan::worker {

inline bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_RETRYABLE_H_
