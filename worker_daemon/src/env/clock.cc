#include "pipeplan/worker/env/clock.h"

#include "absl/time/clock.h"

namespace pipeplan::worker {
namespace {

class WallClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
  bool AwaitWithTimeout(absl::Mutex& mu, const absl::Condition& condition, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) override {
    return mu.AwaitWithTimeout(condition, timeout);
  }
};

}  // namespace

Clock& RealClock() {
  static WallClock* const clock = new WallClock();
  return *clock;
}

}  // namespace pipeplan::worker
