#include "pipeplan/server/solve/request_cache.h"

#include <utility>

#include "absl/hash/hash.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace pipeplan::server {

std::string CanonicalBytes(const v1::PlanRequest& request) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream raw(&out);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    request.SerializeToCodedStream(&coded);
  }
  return out;
}

uint64_t RequestHash(const std::string& canonical_bytes) {
  return absl::Hash<std::string>{}(canonical_bytes);
}

RequestCache::RequestCache(Options options, const Clock* clock)
    : options_(options), clock_(clock) {}

std::optional<std::shared_ptr<const v1::Plan>> RequestCache::Lookup(
    const std::string& canonical_bytes) {
  const uint64_t key = RequestHash(canonical_bytes);
  absl::MutexLock l(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.bytes != canonical_bytes) {
    ++misses_;
    return std::nullopt;
  }
  if (clock_->Now() >= it->second.expires) {
    EraseLocked(it);
    ++misses_;
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  ++hits_;
  return it->second.plan;
}

void RequestCache::Insert(const std::string& canonical_bytes,
                          std::shared_ptr<const v1::Plan> plan) {
  if (options_.max_entries == 0 || canonical_bytes.size() > options_.max_request_bytes) return;
  // The map node and list node are a few hundred bytes more; the payloads
  // dominate.
  const size_t cost = canonical_bytes.size() + plan->SpaceUsedLong() + 256;
  if (cost > options_.max_bytes) return;
  const uint64_t key = RequestHash(canonical_bytes);
  absl::MutexLock l(&mu_);
  if (auto it = entries_.find(key); it != entries_.end()) EraseLocked(it);
  lru_.push_front(key);
  entries_[key] =
      Entry{canonical_bytes, std::move(plan), clock_->Now() + options_.ttl, lru_.begin(), cost};
  bytes_ += cost;
  EvictLocked();
}

void RequestCache::EraseLocked(absl::flat_hash_map<uint64_t, Entry>::iterator it) {
  bytes_ -= it->second.cost;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void RequestCache::EvictLocked() {
  while (entries_.size() > options_.max_entries || bytes_ > options_.max_bytes) {
    EraseLocked(entries_.find(lru_.back()));
  }
}

size_t RequestCache::size() const {
  absl::MutexLock l(&mu_);
  return entries_.size();
}
size_t RequestCache::bytes() const {
  absl::MutexLock l(&mu_);
  return bytes_;
}
uint64_t RequestCache::hits() const {
  absl::MutexLock l(&mu_);
  return hits_;
}
uint64_t RequestCache::misses() const {
  absl::MutexLock l(&mu_);
  return misses_;
}

}  // namespace pipeplan::server
