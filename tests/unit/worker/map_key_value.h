// An in-memory KeyValue for rendezvous tests: ranks of one test process
// meet through it instead of the planner's rendezvous RPCs.
#ifndef PIPEPLAN_TESTS_UNIT_WORKER_MAP_KEY_VALUE_H_
#define PIPEPLAN_TESTS_UNIT_WORKER_MAP_KEY_VALUE_H_

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "pipeplan/worker/transport/rendezvous.h"

namespace pipeplan::worker {

class MapKeyValue final : public KeyValue {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    absl::MutexLock l(&mu_);
    map_[key] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) override {
    absl::MutexLock l(&mu_);
    ++gets_;
    auto it = map_.find(key);
    if (it == map_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  // Get calls so far: a test waits until a rank is blocked polling a key.
  int gets() {
    absl::MutexLock l(&mu_);
    return gets_;
  }

 private:
  absl::Mutex mu_;
  int gets_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_TESTS_UNIT_WORKER_MAP_KEY_VALUE_H_
