// Collectives the executors build from a Transport's point-to-point
// Send/Recv, so they run alike over Gloo, NCCL and the in-memory hub: a sum
// over ranks of a few values (global gradient norm, NaN agreement,
// checkpoint barriers), a ring all-reduce of gradient buffers (over a
// replica group), and the tag space they use.
//
// Every rank of the transport must make the same calls in the same order
// with the same epoch. Results are bit-identical on every rank: SumOverRanks
// has rank 0 add the ranks' values in rank order and send the one result
// back; the ring sums each chunk on one rank and passes that sum on.
#ifndef PIPEPLAN_WORKER_COLLECTIVES_H_
#define PIPEPLAN_WORKER_COLLECTIVES_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

// What an executor-level message is for; part of its tag.
enum class TagPurpose : uint64_t {
  kSum = 1,
  kTiedGradient = 2,
  kStateSize = 3,
  kStateData = 4,
  kRingSum = 5,
  kSnapshotSize = 6,
  kSnapshotData = 7,
};

// Tags the executor uses: at or above 1 << 62, so they never meet the
// runtime's activation/gradient tags (small) nor Gloo's control tags
// (1 << 60 + a counter). `epoch` (e.g. the step) keeps consecutive calls
// apart; `index` tells messages of one call apart.
inline uint64_t ExecutorTag(TagPurpose purpose, uint64_t epoch, uint64_t index) {
  return (uint64_t{1} << 62) | (static_cast<uint64_t>(purpose) << 56) | ((epoch & 0xffffff) << 32) |
         (index & 0xffffffff);
}

// values[i] <- sum over ranks of values[i]. DEADLINE_EXCEEDED / UNAVAILABLE
// from the transport.
absl::Status SumOverRanks(Transport& transport, std::span<double> values, uint64_t epoch,
                          absl::Duration timeout);

// values[i] <- sum over ranks of values[i], by a ring (reduce-scatter, then
// all-gather): each rank sends and receives 2 (n - 1) / n of the buffer,
// whatever n. Every rank passes a buffer of the same length. Errors as
// SumOverRanks. `call` tells several all-reduces of one epoch apart (the
// buckets of one step; below 1 << 15, with at most 1 << 15 ranks).
absl::Status RingAllReduceSum(Transport& transport, std::span<float> values, uint64_t epoch,
                              absl::Duration timeout, uint32_t call = 0);
absl::Status RingAllReduceSum(Transport& transport, std::span<double> values, uint64_t epoch,
                              absl::Duration timeout, uint32_t call = 0);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_COLLECTIVES_H_
