#include "fake_clock.h"

#include <algorithm>

namespace pipeplan::worker::testing {

absl::Time FakeClock::Now() {
  absl::MutexLock l(&mu_);
  return now_;
}

void FakeClock::SleepFor(absl::Duration d) {
  absl::Mutex mu;
  bool never = false;
  absl::MutexLock l(&mu);
  AwaitWithTimeout(mu, absl::Condition(&never), d);
}

// The caller's mutex is released while it waits, as Mutex::AwaitWithTimeout
// does; Advance wakes it by taking and releasing that mutex (absl::Mutex
// re-evaluates waiters' conditions on every release).
bool FakeClock::AwaitWithTimeout(absl::Mutex& mu, const absl::Condition& condition,
                                 absl::Duration timeout) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  auto wait = std::make_shared<Wait>();
  {
    absl::MutexLock l(&mu_);
    wait->timeout = timeout;
    wait->deadline = now_ + timeout;
    wait->mu = &mu;
    wait->expired.store(timeout <= absl::ZeroDuration());
    waits_.push_back(wait);
  }
  auto done = [&] { return condition.Eval() || wait->expired.load(); };
  mu.Await(absl::Condition(&done));
  mu.Unlock();
  {
    absl::MutexLock l(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waking_ == 0; };
    mu_.Await(absl::Condition(&idle));
    waits_.remove(wait);
  }
  mu.Lock();
  return condition.Eval();
}

void FakeClock::Advance(absl::Duration d) {
  std::vector<absl::Mutex*> wake;
  {
    absl::MutexLock l(&mu_);
    now_ += d;
    for (const std::shared_ptr<Wait>& w : waits_) {
      if (!w->expired.load() && w->deadline <= now_) {
        w->expired.store(true);
        wake.push_back(w->mu);
      }
    }
    ++waking_;
  }
  for (absl::Mutex* m : wake) {
    m->Lock();
    m->Unlock();
  }
  absl::MutexLock l(&mu_);
  --waking_;
}

bool FakeClock::AwaitPendingWait(absl::Duration timeout, absl::Duration limit) {
  absl::MutexLock l(&mu_);
  auto pending = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::any_of(waits_.begin(), waits_.end(), [&](const std::shared_ptr<Wait>& w) {
      return !w->expired.load() && w->timeout == timeout;
    });
  };
  return mu_.AwaitWithTimeout(absl::Condition(&pending), limit);
}

std::vector<absl::Duration> FakeClock::PendingTimeouts() {
  absl::MutexLock l(&mu_);
  std::vector<absl::Duration> out;
  for (const std::shared_ptr<Wait>& w : waits_) {
    if (!w->expired.load()) out.push_back(w->timeout);
  }
  return out;
}

}  // namespace pipeplan::worker::testing
