// Admission of solves by memory (Envoy's overload manager idea, at request
// granularity). Before a Plan, CreateJob or ReplanJob solve is queued, its
// peak memory is estimated from the request's size (EstimateSolveBytes) and
// reserved against one planner-wide budget; the reservation is held until the
// solve's answer is sent. A request that does not fit in what is left is
// refused, so no mix of requests can hold more than the budget at once.
//
// The estimate is linear in nodes, edges and request bytes, quadratic in
// devices (the cluster's bandwidth matrix), with constants measured on the
// planner (docs/operations.md, "Limits") and rounded up.
//
// Thread safety: all methods may be called from any thread.
#ifndef PIPEPLAN_SERVER_SOLVE_MEMORY_BUDGET_H_
#define PIPEPLAN_SERVER_SOLVE_MEMORY_BUDGET_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::server {

// Peak bytes a solve of `request` may use, `request_bytes` being its
// serialized size (the caller usually has it already). Never negative; does
// not overflow for any request gRPC can deliver.
int64_t EstimateSolveBytes(const v1::PlanRequest& request, int64_t request_bytes);

class MemoryBudget {
 public:
  // Held while a solve runs; gives its bytes back when the last copy goes.
  class Reservation {
   public:
    ~Reservation();
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    int64_t bytes() const { return bytes_; }

   private:
    friend class MemoryBudget;
    Reservation(MemoryBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    MemoryBudget* const budget_;
    const int64_t bytes_;
  };

  // `capacity_bytes` <= 0: unlimited (every reservation succeeds).
  explicit MemoryBudget(int64_t capacity_bytes);
  // REQUIRES: every Reservation is gone.
  ~MemoryBudget() = default;
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Reserves `bytes` now or fails with RESOURCE_EXHAUSTED: one message when
  // `bytes` alone is more than the budget (the request can never run here),
  // another when it does not fit next to the solves already admitted
  // (retry later). Both name --solve-memory-bytes and its value.
  absl::StatusOr<std::shared_ptr<Reservation>> TryReserve(int64_t bytes);
  // Waits up to `timeout` for `bytes` to fit; for the planner's own solves
  // (replanning), which must not be refused by a burst of client requests.
  absl::StatusOr<std::shared_ptr<Reservation>> Reserve(int64_t bytes, absl::Duration timeout);

  int64_t capacity() const { return capacity_; }
  int64_t in_use() const;

 private:
  absl::Status TooLarge(int64_t bytes) const;
  void Release(int64_t bytes);

  const int64_t capacity_;
  mutable absl::Mutex mu_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_SOLVE_MEMORY_BUDGET_H_
