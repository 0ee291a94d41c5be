// Time as the worker's control plane reads it: now, a sleep, and a wait on a
// mutex with a timeout. The daemon uses RealClock(); tests pass a fake one
// (tests/unit/worker/fake_clock.h) so backoffs, leases and stall graces run
// in virtual time: outcomes do not depend on how busy the machine is.
//
// Thread-safe. Timeouts are measured on the clock itself: with a fake clock
// a wait ends when the clock is advanced past it, not after real time.
#ifndef PIPEPLAN_WORKER_ENV_CLOCK_H_
#define PIPEPLAN_WORKER_ENV_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pipeplan::worker {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  virtual void SleepFor(absl::Duration d) = 0;
  // REQUIRES: `mu` is held. Waits until `condition` holds or `timeout` has
  // passed on this clock, as absl::Mutex::AwaitWithTimeout does; returns
  // whether the condition holds. `mu` must outlive the wait.
  virtual bool AwaitWithTimeout(absl::Mutex& mu, const absl::Condition& condition,
                                absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
};

// The process's wall clock (absl::Now, absl::SleepFor, Mutex waits).
Clock& RealClock();

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_ENV_CLOCK_H_
