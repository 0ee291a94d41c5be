// The one retry policy every pipeplan part uses against the planner (and the
// planner against its store): which failures are worth the same call again,
// how long to wait between tries, when to give up, and how many bytes of
// unsent calls may wait. Modelled on a retrying RPC client: retry only the
// retryable codes, bounded by a deadline and by pending bytes.
//
// Decided by status code, never by message text. Time and sleep come in
// through RetryEnv, so a worker can wait on its own shutdown condition and a
// test on a fake clock. Thread-safety: Backoff is not thread-safe (one per
// loop); PendingBytes is.
#ifndef PIPEPLAN_COMMON_RETRY_POLICY_H_
#define PIPEPLAN_COMMON_RETRY_POLICY_H_

#include <cstddef>
#include <functional>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pipeplan::common {

// The same call may succeed later with no change by the caller: the callee is
// restarting, draining or unreachable (UNAVAILABLE), the call ran out of time
// (DEADLINE_EXCEEDED), or a quota that drains refused it (RESOURCE_EXHAUSTED,
// e.g. the planner's admission limit). Everything else needs a different call.
bool IsRetryable(absl::StatusCode code);
inline bool IsRetryable(const absl::Status& s) { return IsRetryable(s.code()); }

struct RetryPolicy {
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  double multiplier = 2.0;
};

// Exponential backoff: Next() gives the wait before the next try and grows it
// up to max_backoff; Reset() after a success.
class Backoff {
 public:
  explicit Backoff(const RetryPolicy& policy) : policy_(policy), next_(policy.initial_backoff) {}
  absl::Duration Next();
  absl::Duration Peek() const { return next_; }
  void Reset() { next_ = policy_.initial_backoff; }

 private:
  RetryPolicy policy_;
  absl::Duration next_;
};

// Where a retry loop reads the time and waits. `sleep` returns false when the
// caller must stop now (shutdown), which ends the loop with the last status.
struct RetryEnv {
  std::function<absl::Time()> now = [] { return absl::Now(); };
  std::function<bool(absl::Duration)> sleep = [](absl::Duration d) {
    absl::SleepFor(d);
    return true;
  };
};

namespace retry_internal {
inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace retry_internal

// Calls `call` (returning absl::Status or absl::StatusOr<T>) until it
// succeeds, fails with a code that is not retryable, the next wait would end
// past `deadline`, or env.sleep asks to stop; returns the last result.
template <typename Call>
std::invoke_result_t<Call&> RetryUntil(const RetryPolicy& policy, absl::Time deadline,
                                       const RetryEnv& env, Call&& call) {
  Backoff backoff(policy);
  while (true) {
    auto result = call();
    const absl::Status& s = retry_internal::StatusOf(result);
    if (s.ok() || !IsRetryable(s)) return result;
    absl::Duration wait = backoff.Next();
    if (env.now() + wait > deadline || !env.sleep(wait)) return result;
  }
}

// A bound on the bytes of calls waiting to be sent (reports queued while the
// planner is away), so a long outage costs bounded memory. Reserve() refuses
// with RESOURCE_EXHAUSTED naming the limit; Release() returns bytes once sent
// or dropped.
class PendingBytes {
 public:
  explicit PendingBytes(size_t limit) : limit_(limit) {}
  absl::Status Reserve(size_t bytes);
  void Release(size_t bytes);
  size_t pending() const;
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  mutable absl::Mutex mu_;
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pipeplan::common

#endif  // PIPEPLAN_COMMON_RETRY_POLICY_H_
