#include "rendezvous_space.h"

#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan::server::internal {
namespace {

// "v<N>/...": the plan version workers put in front of their keys; -1 for
// a key without one.
int64_t KeyVersion(const std::string& key) {
  const size_t slash = key.find('/');
  int64_t version = 0;
  if (key.size() < 3 || key[0] != 'v' || slash == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(key).substr(1, slash - 1), &version) || version < 0) {
    return -1;
  }
  return version;
}

v1::RendezvousGetResponse Found(std::optional<std::string> value) {
  v1::RendezvousGetResponse r;
  r.set_found(value.has_value());
  if (value) r.set_value(*std::move(value));
  return r;
}

}  // namespace

absl::Status RendezvousSpace::CheckEntry(const std::string& key, const std::string& value,
                                         const JobRegistry::Options& options) {
  if (key.empty() || key.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key must be 1 to ", kMaxIdBytes, " bytes, got ", key.size()));
  }
  const int64_t value_bytes = static_cast<int64_t>(value.size());
  const int64_t limit = options.rendezvous_max_value_bytes;
  if (value_bytes > limit) {
    return OverLimit(absl::StrCat("rendezvous value \"", key, "\" has ", value_bytes, " bytes"),
                     "rendezvous-max-value-bytes", limit);
  }
  return absl::OkStatus();
}

absl::Status RendezvousSpace::Set(Job& job, const std::string& key, const std::string& value) {
  const JobRegistry::Options& options = ctx_->options;
  const std::string& job_id = job.record.id;
  auto it = job.rendezvous.find(key);
  const bool is_new = it == job.rendezvous.end();
  const int64_t key_bytes = static_cast<int64_t>(key.size());
  const int64_t delta = static_cast<int64_t>(value.size()) -
                        (is_new ? -key_bytes : static_cast<int64_t>(it->second.size()));
  if (is_new &&
      static_cast<int64_t>(job.rendezvous.size()) >= options.rendezvous_max_keys_per_job) {
    return OverLimit(
        absl::StrCat("job ", job_id, " has ", job.rendezvous.size(), " rendezvous keys"),
        "rendezvous-max-keys-per-job", options.rendezvous_max_keys_per_job);
  }
  if (job.rendezvous_bytes + delta > options.rendezvous_max_bytes_per_job) {
    return OverLimit(absl::StrCat("job ", job_id, " would hold ", job.rendezvous_bytes + delta,
                                  " bytes of rendezvous keys and values"),
                     "rendezvous-max-bytes-per-job", options.rendezvous_max_bytes_per_job);
  }
  if (bytes_ + delta > options.rendezvous_max_bytes) {
    return OverLimit(absl::StrCat("the planner would hold ", bytes_ + delta,
                                  " bytes of rendezvous keys and values (all jobs)"),
                     "rendezvous-max-bytes", options.rendezvous_max_bytes);
  }
  if (ctx_->replicated()) {
    // Shared: workers of the job on other replicas read it from the store.
    PIPEPLAN_RETURN_IF_ERROR(ctx_->store->RendezvousPut(job_id, key, value, KeyVersion(key)));
  }
  // A fresh string, so a shorter value does not keep a longer one's buffer.
  if (is_new) {
    job.rendezvous.emplace(key, value);
  } else {
    it->second = std::string(value);
  }
  job.rendezvous_bytes += delta;
  bytes_ += delta;
  return absl::OkStatus();
}

absl::StatusOr<v1::RendezvousGetResponse> RendezvousSpace::Get(const Job& job,
                                                               const std::string& key) const {
  if (auto it = job.rendezvous.find(key); it != job.rendezvous.end()) return Found(it->second);
  if (!ctx_->replicated()) return Found(std::nullopt);
  // Set through another replica.
  return GetStored(job.record.id, key);
}

absl::StatusOr<v1::RendezvousGetResponse> RendezvousSpace::GetStored(const std::string& job_id,
                                                                     const std::string& key) const {
  PIPEPLAN_ASSIGN_OR_RETURN(std::optional<std::string> stored,
                            ctx_->store->RendezvousFetch(job_id, key));
  return Found(std::move(stored));
}

void RendezvousSpace::DropBefore(Job& job, int64_t oldest_kept) {
  int64_t freed = 0;
  absl::erase_if(job.rendezvous, [&](const auto& kv) {
    const std::string& key = kv.first;
    const int64_t version = KeyVersion(key);
    if (version < 0 || version >= oldest_kept) return false;
    freed += static_cast<int64_t>(key.size() + kv.second.size());
    return true;
  });
  job.rendezvous_bytes -= freed;
  bytes_ -= freed;
}

int64_t RendezvousSpace::Clear(Job& job) {
  const int64_t freed = job.rendezvous_bytes;
  bytes_ -= freed;
  job.rendezvous_bytes = 0;
  job.rendezvous = {};
  return freed;
}

}  // namespace pipeplan::server::internal
