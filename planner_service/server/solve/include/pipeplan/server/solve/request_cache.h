// A short-lived cache of Plan answers keyed by a hash of the request's
// deterministic serialization. Identical requests within `ttl` are answered
// from memory; the stored request bytes are compared on a hit, so a hash
// collision can never return another request's plan.
//
// Bounded by entries and by bytes (the request bytes plus the plan's memory):
// inserting past either evicts the least recently used entries, and an entry
// larger than max_bytes alone is not kept.
//
// Thread safety: all methods may be called from any thread.
#ifndef PIPEPLAN_SERVER_SOLVE_REQUEST_CACHE_H_
#define PIPEPLAN_SERVER_SOLVE_REQUEST_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::server {

// The request's canonical bytes (deterministic protobuf serialization).
std::string CanonicalBytes(const v1::PlanRequest& request);
uint64_t RequestHash(const std::string& canonical_bytes);

class RequestCache {
 public:
  struct Options {
    absl::Duration ttl = absl::Seconds(60);
    size_t max_entries = 256;
    // Request bytes plus plan memory of every entry together.
    size_t max_bytes = 256 << 20;
    // Requests larger than this are never cached.
    size_t max_request_bytes = 16 << 20;
  };
  // `clock` must outlive the cache.
  RequestCache(Options options, const Clock* clock);

  // The cached plan for these canonical bytes, if fresh.
  std::optional<std::shared_ptr<const v1::Plan>> Lookup(const std::string& canonical_bytes);
  void Insert(const std::string& canonical_bytes, std::shared_ptr<const v1::Plan> plan);

  size_t size() const;
  // Memory the entries account for (request bytes + plan memory).
  size_t bytes() const;
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  struct Entry {
    std::string bytes;
    std::shared_ptr<const v1::Plan> plan;
    absl::Time expires;
    std::list<uint64_t>::iterator lru;
    size_t cost;  // what the entry accounts for in bytes_
  };
  void EraseLocked(absl::flat_hash_map<uint64_t, Entry>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_SOLVE_REQUEST_CACHE_H_
