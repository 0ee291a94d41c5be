// Time source for leases and cache expiry. Production code uses RealClock();
// tests pass a FakeClock they advance by hand (LevelDB-style: the
// environment is passed in, never reached for).
#ifndef PIPEPLAN_SERVER_BASE_CLOCK_H_
#define PIPEPLAN_SERVER_BASE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pipeplan::server {

// Thread safety: implementations are safe to call from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The process-wide wall clock. Never null, never deleted.
Clock* RealClock();

// A clock that only moves when told to.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock l(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_BASE_CLOCK_H_
