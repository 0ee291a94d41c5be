// Lowering passes between compute-only and runnable schedules.
//
// Schedules are written compute-only (F/I/W/B). Before the runtime (or the
// simulator, for exact send/recv placement) can use one, every cross-rank hop
// needs an explicit SEND on the producer's rank and a RECV on the consumer's.
// The placement matches torch.distributed.pipelining's _add_send_recv so that
// schedules lowered here and there are identical. MergeBackward is PyTorch's
// _merge_bw: it fuses an I immediately followed by the W of the same stage and
// microbatch into one B, which runs faster when nothing fills the gap.
#ifndef PIPEPLAN_CORE_SCHEDULE_LOWERING_H_
#define PIPEPLAN_CORE_SCHEDULE_LOWERING_H_

#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"

namespace pipeplan::schedule {

// Adds SEND_F/RECV_F after each forward and SEND_B/RECV_B after each I or B
// whose neighbouring stage lives on another rank (hops within a rank need
// none). Works in lock-step rounds over ranks in ascending order: in a round
// each rank either consumes its next slot (an idle slot always; an action once
// its input is local or its RECV has been placed) or waits; a placed action
// appends its SEND on its own rank and the matching RECV on the peer rank at
// once. The result has no idle slots. Fails on a schedule that already has
// communication or whose compute order can never complete.
absl::StatusOr<PipelineSchedule> InsertSendRecv(const PipelineSchedule& compute_only);
// The same into `*out` (which must not be `compute_only`), reusing its
// programs' storage so that a search loop need not allocate or page-fault
// after the first call. On error `*out` is left unspecified.
absl::Status InsertSendRecv(const PipelineSchedule& compute_only, PipelineSchedule* out);

// Merges each I whose next non-idle action on the same rank is the W of the
// same stage and microbatch into a B. Idle slots are dropped.
absl::StatusOr<PipelineSchedule> MergeBackward(const PipelineSchedule& schedule);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_LOWERING_H_
