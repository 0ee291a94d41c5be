// Validation of built-in and user-supplied schedules.
//
// Before the planner trusts a schedule (and before a user's CSV reaches the
// runtime) it must be runnable: every (stage, microbatch) gets exactly one F
// and one backward (B, or I followed by W), every action sits on the rank that
// owns its stage, lowered schedules pair every cross-rank hop with one SEND and
// one RECV, and executing the programs in order can never deadlock.
#ifndef PIPEPLAN_CORE_SCHEDULE_VALIDATE_H_
#define PIPEPLAN_CORE_SCHEDULE_VALIDATE_H_

#include "absl/status/status.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"

namespace pipeplan::schedule {

// OK, or InvalidArgument naming the problem. Ordering problems name the first
// (lowest) rank and its step that can never run and the dependency it waits
// for, e.g. "rank 1 step 0 (1F0) can never run: it needs 1RECV_F0, ...".
absl::Status ValidateSchedule(const PipelineSchedule& schedule);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_VALIDATE_H_
