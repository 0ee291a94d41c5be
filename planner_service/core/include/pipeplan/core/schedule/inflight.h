// How many microbatches' activations a stage holds at its peak.
//
// The partitioner needs this per candidate stage to bound activation memory
// long before it builds and simulates a whole schedule. Definition (the same
// the simulator's peak_inflight_per_stage uses): the maximum, over the
// stage's rank's program order, of microbatches whose F on that stage has run
// and whose I or B has not.
#ifndef PIPEPLAN_CORE_SCHEDULE_INFLIGHT_H_
#define PIPEPLAN_CORE_SCHEDULE_INFLIGHT_H_

#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan::schedule {

// `num_stages` must equal ranks * StagesPerRank(kind, chunks_per_rank) for
// some number of ranks, and (microbatches, chunks_per_rank) must satisfy BuildSchedule's rules.
// GPipe and LoopedBFS hold all m; 1F1B holds min(m, p - s) in closed form.
// For the interleaved and V-shaped families the warm-up depth depends on
// PyTorch's round structure (m / p rounds, with remainders), so the value is
// computed by replaying only that stage's rank's order: O(StagesPerRank * m)
// time, no schedule or simulation.
absl::StatusOr<int> PeakInflightMicrobatches(ScheduleKind kind, int stage, int num_stages,
                                             int microbatches, int chunks_per_rank = 1);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_INFLIGHT_H_
