// A Clock for tests: time stands still until the test advances it, and
// every wait (SleepFor, AwaitWithTimeout) ends when the clock passes its
// deadline or its condition holds — never after real time. Tests see the
// waits that are pending, so they advance exactly when the code under test
// is waiting, and assert what happens at each deadline.
#ifndef PIPEPLAN_TESTS_UNIT_WORKER_FAKE_CLOCK_H_
#define PIPEPLAN_TESTS_UNIT_WORKER_FAKE_CLOCK_H_

#include <atomic>
#include <list>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/worker/env/clock.h"

namespace pipeplan::worker::testing {

class FakeClock final : public Clock {
 public:
  absl::Time Now() override ABSL_LOCKS_EXCLUDED(mu_);
  void SleepFor(absl::Duration d) override ABSL_LOCKS_EXCLUDED(mu_);
  bool AwaitWithTimeout(absl::Mutex& mu, const absl::Condition& condition,
                        absl::Duration timeout) override;

  // Moves time forward by `d` and wakes the waits whose deadline passed.
  // REQUIRES: the mutexes of pending waits outlive this call.
  void Advance(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks (in real time, up to `limit`) until a wait with exactly this
  // timeout is pending and has not yet expired; false when none came.
  bool AwaitPendingWait(absl::Duration timeout, absl::Duration limit = absl::Seconds(30))
      ABSL_LOCKS_EXCLUDED(mu_);
  // The timeouts of the pending, unexpired waits, as they were asked for.
  std::vector<absl::Duration> PendingTimeouts() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Wait {
    absl::Duration timeout;
    absl::Time deadline;
    absl::Mutex* mu;
    // Read by the waiter's condition under its own mutex, so atomic.
    std::atomic<bool> expired{false};
  };

  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1'000'000);
  std::list<std::shared_ptr<Wait>> waits_ ABSL_GUARDED_BY(mu_);
  // Advance calls still waking waiters: a wait leaves waits_ only when none
  // is, so no waiter's mutex is locked after it returned.
  int waking_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pipeplan::worker::testing

#endif  // PIPEPLAN_TESTS_UNIT_WORKER_FAKE_CLOCK_H_
