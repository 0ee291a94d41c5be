// Simulating ranks whose computes share processors: CPU workers of one
// machine.
//
// Simulate (simulator.h) gives every rank a processor of its own: right for
// GPUs, wrong for CPU workers, where the ranks of a machine compete for its
// cores. Four single-threaded workers on two cores run a compute at full
// speed while at most two compute at once and at half speed while four do;
// how often that happens depends on the schedule (its bubbles), so a factor
// fitted on one plan mispredicts another (docs/observability.md, "CPU
// workers share cores"). SimulateShared models it as processor sharing: a compute's
// cost is its seconds alone on its pool, and at every instant it progresses
// at min(1, capacity / load of the computes running in its pool).
//
// Everything else is Simulate's semantics (SEND/RECV posting, transfers,
// host time per message, memory); posting a message does not load the pool.
//
// Reentrant; no I/O.
#ifndef PIPEPLAN_CORE_SCHEDULE_SHARED_COMPUTE_H_
#define PIPEPLAN_CORE_SCHEDULE_SHARED_COMPUTE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan::schedule {

// Which ranks share which processors.
struct ComputeSharing {
  // Per rank: its pool (an index into pool_capacity), or -1 for a processor
  // of its own. Empty: every rank has its own.
  std::vector<int> rank_pool;
  // Per rank: the load one of its computes puts on its pool: the threads it
  // keeps busy, times the copies of the rank that run the same action at
  // the same time on the same pool (data-parallel replicas).
  std::vector<double> rank_load;
  // Per pool: its capacity in the units of rank_load (CPUs).
  std::vector<double> pool_capacity;
  // Per rank, or empty: work (seconds alone) the rank runs after its last
  // action, loading its pool as a compute does: the gradient all-reduce's
  // copies and sums on CPU workers, which slow the ranks still computing.
  // Its end is SimulationResult::end_work_finish_seconds.
  std::vector<double> rank_end_seconds;
  // The load end work puts on its pool per unit of rank_load: a ring's
  // process waits for its peer about as long as it copies and sums (0.5).
  double end_work_load = 1;

  // True when no rank is in a pool: SimulateShared is Simulate.
  bool empty() const;
};

// Sizes match (rank_pool empty or one per rank; rank_load one per rank, or
// empty with rank_pool; rank_end_seconds empty or one per rank), every pool
// index is -1 or in range, every load and capacity is finite and positive,
// every end work finite and >= 0, and end_work_load finite and positive.
absl::Status CheckComputeSharing(const ComputeSharing& sharing, int num_ranks);

// Simulate with shared pools: the same result fields (busy_seconds is the
// wall time computes ran, stretched by sharing; the timeline's compute
// events span their wall time; step_seconds and finish_seconds leave the
// end work out, end_work_finish_seconds has its ends). With empty sharing,
// or every pool's capacity at least the sum of its ranks' loads, the
// result equals Simulate's (end work then runs at full speed). Errors: as
// Simulate; INVALID_ARGUMENT (CheckComputeSharing) for a sharing that does
// not fit the schedule.
absl::StatusOr<SimulationResult> SimulateShared(const PipelineSchedule& schedule,
                                                const StageCosts& costs,
                                                const ComputeSharing& sharing,
                                                const SimulateOptions& options = {});

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_SHARED_COMPUTE_H_
