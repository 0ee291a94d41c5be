// Static (order-free) checks on a schedule, shared by every pass that accepts
// user-supplied schedules: shapes, index ranges, stage placement, and that each
// (stage, microbatch) gets exactly one forward and one backward (B, or I + W),
// plus matching SEND/RECV pairs on cross-rank hops when the schedule is lowered.
// Ordering problems (deadlocks) are the execution engine's job.
#ifndef PIPEPLAN_CORE_SCHEDULE_STRUCTURE_H_
#define PIPEPLAN_CORE_SCHEDULE_STRUCTURE_H_

#include "absl/status/status.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"

namespace pipeplan::schedule::internal {

// Shapes and placement only: sizes agree, indices are in range and every action
// sits on the rank that owns its stage. Cheap enough for every pass.
absl::Status CheckShape(const PipelineSchedule& schedule);

// CheckShape plus the per-(stage, microbatch) accounting described above.
// Also reports whether the schedule has any SEND/RECV (it is then checked as a
// lowered schedule), which saves callers a pass.
absl::Status CheckStructure(const PipelineSchedule& schedule, bool* has_communication);

}  // namespace pipeplan::schedule::internal

#endif  // PIPEPLAN_CORE_SCHEDULE_STRUCTURE_H_
