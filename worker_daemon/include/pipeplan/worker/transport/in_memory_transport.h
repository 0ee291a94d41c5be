// An in-process Transport: ranks are threads of one process that share a
// MemoryHub. Sends are buffered (they complete at once); a recv completes once
// the matching send was posted. For tests and single-process runs.
#ifndef PIPEPLAN_WORKER_IN_MEMORY_TRANSPORT_H_
#define PIPEPLAN_WORKER_IN_MEMORY_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

class MemoryHub {
 public:
  explicit MemoryHub(int size) : size_(size) {}
  int size() const { return size_; }
  // The transport of `rank`; the hub must outlive it.
  std::unique_ptr<Transport> Connect(int rank);

 private:
  friend class MemoryTransport;
  friend class MemoryRecv;
  using Key = std::tuple<int, int, uint64_t>;  // src, dst, tag
  const int size_;
  absl::Mutex mu_;
  absl::flat_hash_map<Key, std::vector<std::byte>> mailbox_ ABSL_GUARDED_BY(mu_);
  // AllReduceMax: a generation-counted barrier.
  int64_t reduce_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int reduce_arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reduce_value_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reduce_result_ ABSL_GUARDED_BY(mu_) = 0;
  // Ranks whose transport was aborted.
  std::vector<bool> aborted_ ABSL_GUARDED_BY(mu_) = std::vector<bool>(size_, false);
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_IN_MEMORY_TRANSPORT_H_
