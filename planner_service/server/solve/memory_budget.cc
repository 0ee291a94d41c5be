#include "pipeplan/server/solve/memory_budget.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pipeplan::server {
namespace {

// Measured peaks of pipeplan-planner (pipeplan-hostile --phases large, chain
// graphs, 8 devices, fixed and automatic options), rounded up: about 1.2 KB
// per node with fixed options and 1.9 KB with the full search, the request's
// wire bytes counted twice (the received message and its copy) and the
// cluster's bandwidth and latency matrices per device pair.
constexpr double kBaseBytes = 8 << 20;
constexpr double kBytesPerNode = 1'536;
constexpr double kBytesPerEdge = 512;
constexpr double kBytesPerRequestByte = 2;
constexpr double kBytesPerDevicePair = 32;
// From about a thousand nodes on, the search's CBC MILP (method auto or
// milp) runs on the contracted graph (a few hundred super-nodes, ~12k
// rows): 40-75 MB more whatever the graph's size (`pipeplan plan` on 2k-8k
// node transformers).
constexpr int kMilpNodes = 1'000;
constexpr double kMilpBytes = 96 << 20;

bool RunsMilp(const v1::PlanRequest& request) {
  const v1::PartitionMethod m = request.options().method();
  return request.graph().nodes_size() >= kMilpNodes &&
         (m == v1::METHOD_AUTO || m == v1::METHOD_MILP);
}

// Far above any budget, far below overflow.
constexpr double kMostBytes = static_cast<double>(int64_t{1} << 60);

}  // namespace

int64_t EstimateSolveBytes(const v1::PlanRequest& request, int64_t request_bytes) {
  const double devices = request.cluster().devices_size();
  const double bytes =
      kBaseBytes + kBytesPerNode * request.graph().nodes_size() +
      kBytesPerEdge * request.graph().edges_size() +
      kBytesPerRequestByte * static_cast<double>(std::max<int64_t>(0, request_bytes)) +
      kBytesPerDevicePair * devices * devices + (RunsMilp(request) ? kMilpBytes : 0);
  return static_cast<int64_t>(std::min(bytes, kMostBytes));
}

MemoryBudget::Reservation::~Reservation() { budget_->Release(bytes_); }

MemoryBudget::MemoryBudget(int64_t capacity_bytes) : capacity_(capacity_bytes) {}

absl::Status MemoryBudget::TooLarge(int64_t bytes) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the solve is estimated to need ", bytes,
      " bytes, more than the whole solve memory budget --solve-memory-bytes=", capacity_,
      "; send a smaller graph or cluster"));
}

absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> MemoryBudget::TryReserve(int64_t bytes) {
  bytes = std::max<int64_t>(0, bytes);
  if (capacity_ > 0) {
    if (bytes > capacity_) return TooLarge(bytes);
    absl::MutexLock l(&mu_);
    if (in_use_ + bytes > capacity_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the solve is estimated to need ", bytes,
          " bytes and solves admitted "
          "before it hold ",
          in_use_, " of the budget --solve-memory-bytes=", capacity_, "; retry later"));
    }
    in_use_ += bytes;
  } else {
    absl::MutexLock l(&mu_);
    in_use_ += bytes;
  }
  return std::shared_ptr<Reservation>(new Reservation(this, bytes));
}

absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> MemoryBudget::Reserve(
    int64_t bytes, absl::Duration timeout) {
  bytes = std::max<int64_t>(0, bytes);
  if (capacity_ > 0 && bytes > capacity_) return TooLarge(bytes);
  absl::MutexLock l(&mu_);
  auto fits = [this, bytes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return capacity_ <= 0 || in_use_ + bytes <= capacity_;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&fits), timeout)) {
    return absl::ResourceExhaustedError(absl::StrCat("the solve is estimated to need ", bytes,
                                                     " bytes and the budget "
                                                     "--solve-memory-bytes=",
                                                     capacity_, " had no room for ",
                                                     absl::FormatDuration(timeout)));
  }
  in_use_ += bytes;
  return std::shared_ptr<Reservation>(new Reservation(this, bytes));
}

int64_t MemoryBudget::in_use() const {
  absl::MutexLock l(&mu_);
  return in_use_;
}

void MemoryBudget::Release(int64_t bytes) {
  absl::MutexLock l(&mu_);
  in_use_ -= bytes;
}

}  // namespace pipeplan::server
