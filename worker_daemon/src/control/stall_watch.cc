#include "stall_watch.h"

#include <algorithm>
#include <utility>

namespace pipeplan::worker {

StallWatch::StallWatch(std::function<int64_t()> latest_version,
                       std::function<void(int64_t)> on_abort, absl::Duration poll, Clock& clock,
                       DevicesFn latest_devices)
    : latest_version_(std::move(latest_version)),
      on_abort_(std::move(on_abort)),
      poll_(poll),
      clock_(clock),
      latest_devices_(std::move(latest_devices)) {
  thread_ = std::thread([this] { Loop(); });
}

StallWatch::~StallWatch() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void StallWatch::Arm(Transport* transport, int64_t version, absl::Duration grace, Shrink shrink) {
  absl::MutexLock l(&mu_);
  transport_ = transport;
  version_ = version;
  grace_ = grace;
  shrink_ = std::move(shrink);
  armed_at_ = clock_.Now();
  newer_seen_at_ = absl::InfiniteFuture();
}

void StallWatch::Disarm() {
  absl::MutexLock l(&mu_);
  transport_ = nullptr;
}

absl::Duration StallWatch::GraceLocked() const {
  if (!latest_devices_ || shrink_.devices.empty() || shrink_.grace >= grace_) return grace_;
  const std::vector<std::string> latest = latest_devices_();
  if (latest.empty()) return grace_;  // not known yet
  for (const std::string& d : shrink_.devices) {
    if (std::find(latest.begin(), latest.end(), d) == latest.end()) return shrink_.grace;
  }
  return grace_;
}

void StallWatch::CheckLocked(absl::Time now) {
  if (transport_ == nullptr) return;
  // latest_version_ takes the control state's lock, which is never held
  // while this one is taken: the order is always this lock, then that one.
  if (latest_version_() <= version_) return;
  newer_seen_at_ = std::min(newer_seen_at_, now);
  if (now - std::max(armed_at_, newer_seen_at_) < GraceLocked()) return;
  transport_->Abort();
  transport_ = nullptr;
  if (on_abort_) on_abort_(version_);
}

void StallWatch::Loop() {
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    clock_.AwaitWithTimeout(mu_, absl::Condition(&stopping_), poll_);
    if (stopping_) break;
    CheckLocked(clock_.Now());
  }
}

}  // namespace pipeplan::worker
