#include "pipeplan/common/retry_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pipeplan::common {

bool IsRetryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kResourceExhausted;
}

absl::Duration Backoff::Next() {
  absl::Duration wait = next_;
  next_ = std::min(next_ * policy_.multiplier, policy_.max_backoff);
  return wait;
}

absl::Status PendingBytes::Reserve(size_t bytes) {
  absl::MutexLock lock(&mu_);
  if (pending_ + bytes > limit_) {
    return absl::ResourceExhaustedError(absl::StrCat("pending bytes limit ", limit_, " reached (",
                                                     pending_, " pending, ", bytes, " more)"));
  }
  pending_ += bytes;
  return absl::OkStatus();
}

void PendingBytes::Release(size_t bytes) {
  absl::MutexLock lock(&mu_);
  pending_ -= std::min(bytes, pending_);
}

size_t PendingBytes::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_;
}

}  // namespace pipeplan::common
