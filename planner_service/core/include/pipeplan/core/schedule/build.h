// Generators for the built-in pipeline schedules.
//
// BuildSchedule emits the compute-only per-rank action lists that
// torch.distributed.pipelining's schedule classes run, so a plan found by the
// planner can be executed (or exported as CSV) with the same semantics. The
// lists are compact: PyTorch pads its tables with None slots for readability;
// we emit none, which leaves every rank's order of actions unchanged.
//
// Requirements on (ranks p, microbatches m, chunks_per_rank v):
//   all:                      p >= 1, m >= 1
//   GPipe, 1F1B:              chunks_per_rank is ignored (one stage per rank)
//   Interleaved1F1B,
//   InterleavedZeroBubble:    v >= 1 and m divisible by max(1, m / p) (the
//                             "rounds" of PyTorch's flexible interleaving), so
//                             any m <= p and any multiple of p are accepted
//   LoopedBFS:                v >= 1
//   ZBVZeroBubble:            chunks_per_rank is ignored (two stages per rank)
//   DualPipeV:                m >= 2p (PyTorch's "as many microbatches as
//                             stages"); chunks_per_rank is ignored
#ifndef PIPEPLAN_CORE_SCHEDULE_BUILD_H_
#define PIPEPLAN_CORE_SCHEDULE_BUILD_H_

#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan::schedule {

// Compute-only schedule with num_stages = ranks * StagesPerRank(kind, chunks_per_rank).
absl::StatusOr<PipelineSchedule> BuildSchedule(ScheduleKind kind, int ranks, int microbatches,
                                               int chunks_per_rank = 1);

// The same into `*out`, reusing its programs' storage: a search loop that
// keeps one PipelineSchedule per thread neither allocates nor page-faults
// after the first call. On error `*out` is unchanged.
absl::Status BuildSchedule(ScheduleKind kind, int ranks, int microbatches, int chunks_per_rank,
                           PipelineSchedule* out);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_BUILD_H_
