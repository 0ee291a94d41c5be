#include "pipeplan/worker/transport/connect_watchdog.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace pipeplan::worker {
namespace {

absl::Status Closed() {
  return absl::AbortedError("the connect attempt was given up (its round ended)");
}

// What the caller and the connect thread share: the thread may outlive the
// caller's wait, so it owns its result.
struct Attempt {
  absl::Notification done;
  absl::StatusOr<std::unique_ptr<Transport>> result = absl::UnknownError("not run");
};

}  // namespace

absl::Status ClosableKeyValue::Set(const std::string& key, const std::string& value) {
  absl::MutexLock l(&mu_);
  if (kv_ == nullptr) return Closed();
  return kv_->Set(key, value);
}

absl::StatusOr<std::optional<std::string>> ClosableKeyValue::Get(const std::string& key) {
  absl::MutexLock l(&mu_);
  if (kv_ == nullptr) return Closed();
  return kv_->Get(key);
}

void ClosableKeyValue::Close() {
  absl::MutexLock l(&mu_);
  kv_ = nullptr;
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectWithWatchdog(
    ConnectFn connect, absl::Time deadline, const std::function<absl::Status()>& give_up,
    const std::function<void()>& on_leave) {
  auto attempt = std::make_shared<Attempt>();
  std::thread([attempt, connect = std::move(connect)] {
    attempt->result = connect();
    attempt->done.Notify();
  }).detach();
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (attempt->done.WaitForNotificationWithTimeout(
            std::max(absl::ZeroDuration(), std::min(left, absl::Milliseconds(50))))) {
      return std::move(attempt->result);
    }
    absl::Status stop = give_up ? give_up() : absl::OkStatus();
    if (stop.ok() && absl::Now() < deadline) continue;
    if (on_leave) on_leave();
    if (!stop.ok()) return stop;
    return absl::DeadlineExceededError(
        "the connect attempt did not end by its round's deadline; its thread is left behind");
  }
}

}  // namespace pipeplan::worker
