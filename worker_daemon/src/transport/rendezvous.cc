#include "pipeplan/worker/transport/rendezvous.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"
#include "pipeplan/common/retry_policy.h"

namespace pipeplan::worker {
namespace {

// A key another rank is about to set: poll fast at first, then every 100 ms.
constexpr common::RetryPolicy kPollPolicy{absl::Milliseconds(5), absl::Milliseconds(100), 2.0};

}  // namespace

absl::StatusOr<std::string> KeyValue::WaitGet(const std::string& key, absl::Duration timeout,
                                              const std::function<absl::Status()>& give_up) {
  const absl::Time deadline = absl::Now() + timeout;
  common::Backoff backoff(kPollPolicy);
  absl::Status last = absl::OkStatus();
  while (true) {
    absl::StatusOr<std::optional<std::string>> got = Get(key);
    if (got.ok() && got->has_value()) return std::move(**got);
    if (!got.ok()) {
      if (!common::IsRetryable(got.status())) return got.status();
      last = got.status();
    }
    if (absl::Now() + backoff.Peek() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous key \"", key, "\" was not set within ", absl::FormatDuration(timeout),
          last.ok() ? "" : absl::StrCat(" (last error: ", last.message(), ")")));
    }
    absl::SleepFor(backoff.Next());
    if (give_up) {
      absl::Status s = give_up();
      if (!s.ok()) return s;
    }
  }
}

void GlooKeyValueStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = kv_->Set(prefix_ + key, std::string(data.begin(), data.end()));
  if (!s.ok()) throw ::gloo::IoException(std::string(s.ToString()));
}

absl::StatusOr<std::string> GlooKeyValueStore::Wait(const std::string& key) {
  std::function<absl::Status()> give_up;
  if (give_up_) give_up = [this, &key] { return give_up_(key); };
  return kv_->WaitGet(prefix_ + key, timeout_, give_up);
}

std::vector<char> GlooKeyValueStore::get(const std::string& key) {
  absl::StatusOr<std::string> v = Wait(key);
  if (!v.ok()) throw ::gloo::IoException(std::string(v.status().ToString()));
  return std::vector<char>(v->begin(), v->end());
}

void GlooKeyValueStore::wait(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> v = Wait(key);
    if (!v.ok()) throw ::gloo::IoException(std::string(v.status().ToString()));
  }
}

void GlooKeyValueStore::wait(const std::vector<std::string>& keys,
                             const std::chrono::milliseconds& /*pair_timeout*/) {
  wait(keys);
}

}  // namespace pipeplan::worker
