// Small collectives the torch executor builds from a Transport's
// point-to-point Send/Recv: a sum over ranks (global gradient norm, NaN
// agreement, checkpoint barriers) and the tag space they use.
//
// Every rank of the transport must make the same calls in the same order
// with the same epoch. Results are bit-identical on every rank: rank 0 adds
// the ranks' values in rank order and sends the one result back.
#ifndef PIPEPLAN_WORKER_COLLECTIVES_H_
#define PIPEPLAN_WORKER_COLLECTIVES_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "pipeplan/worker/transport.h"

namespace pipeplan::worker {

// What an executor-level message is for; part of its tag.
enum class TagPurpose : uint64_t {
  kSum = 1,
  kTiedGradient = 2,
  kStateSize = 3,
  kStateData = 4,
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

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_COLLECTIVES_H_
