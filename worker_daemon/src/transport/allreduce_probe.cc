#include "pipeplan/worker/transport/allreduce_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/transport/collectives.h"

namespace pipeplan::worker {
namespace {

constexpr int kTimedCalls = 3;
// RingAllReduceSum's calls are below 1 << 15; a step's buckets count up
// from 0.
constexpr uint32_t kFirstProbeCall = (1u << 15) - 1 - kTimedCalls;

}  // namespace

absl::StatusOr<AllReduceProbe> ProbeAllReduce(Transport& transport, int64_t bytes, uint64_t epoch,
                                              absl::Duration timeout) {
  if (bytes < static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce probe: bytes is ", bytes, "; at least 4"));
  }
  if (transport.size() < 2) {
    return absl::InvalidArgumentError("all-reduce probe: a transport of one rank has no ring");
  }
  std::vector<float> values(static_cast<size_t>(bytes) / sizeof(float), 1.0f);
  std::vector<double> seconds;
  for (int call = 0; call <= kTimedCalls; ++call) {
    const auto start = std::chrono::steady_clock::now();
    PIPEPLAN_RETURN_IF_ERROR(
        RingAllReduceSum(transport, values, epoch, timeout, kFirstProbeCall + call));
    if (call > 0) {
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::sort(seconds.begin(), seconds.end());
  return AllReduceProbe{.bytes = static_cast<double>(values.size() * sizeof(float)),
                        .seconds = seconds[seconds.size() / 2]};
}

}  // namespace pipeplan::worker
