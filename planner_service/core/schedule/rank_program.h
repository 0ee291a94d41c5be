// Per-rank schedule generation, shared by BuildSchedule and the in-flight
// estimate (which only needs one rank's order, not the whole schedule).
#ifndef PIPEPLAN_CORE_SCHEDULE_RANK_PROGRAM_H_
#define PIPEPLAN_CORE_SCHEDULE_RANK_PROGRAM_H_

#include "absl/status/status.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan::schedule::internal {

// The parameter rules documented in build.h.
absl::Status CheckBuildParameters(ScheduleKind kind, int ranks, int microbatches,
                                  int chunks_per_rank);

// Compute-only program of `rank`; parameters must pass CheckBuildParameters.
// The result is built in `reuse`'s storage (cleared first), so callers that
// rebuild schedules in a loop need not allocate.
RankProgram BuildRankProgram(ScheduleKind kind, int rank, int ranks, int microbatches,
                             int chunks_per_rank, RankProgram reuse = {});

}  // namespace pipeplan::schedule::internal

#endif  // PIPEPLAN_CORE_SCHEDULE_RANK_PROGRAM_H_
