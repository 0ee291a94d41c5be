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

// Counts and the stage-to-rank map only (no per-action work).
absl::Status CheckHeader(const PipelineSchedule& schedule);

// The hot-path form of CheckShape's per-action test (no Status, no
// formatting): indices in range, the stage on `rank`, and for SEND/RECV a
// neighbour stage on another rank. `a` must not be an OVERLAP_F_B.
inline bool SimpleOk(const PipelineSchedule& s, int rank, const Action& a) {
  if (static_cast<unsigned>(a.stage) >= static_cast<unsigned>(s.num_stages) ||
      static_cast<unsigned>(a.microbatch) >= static_cast<unsigned>(s.num_microbatches) ||
      s.stage_to_rank[a.stage] != rank) {
    return false;
  }
  if (!IsCommunication(a.type)) return true;
  const int peer = PeerStage(a);
  return static_cast<unsigned>(peer) < static_cast<unsigned>(s.num_stages) &&
         s.stage_to_rank[peer] != rank;
}

// Shapes and placement only: sizes agree, indices are in range and every action
// sits on the rank that owns its stage. Cheap enough for every pass.
absl::Status CheckShape(const PipelineSchedule& schedule);

// CheckShape plus the per-(stage, microbatch) accounting described above.
// Also reports whether the schedule has any SEND/RECV (it is then checked as a
// lowered schedule), which saves callers a pass.
absl::Status CheckStructure(const PipelineSchedule& schedule, bool* has_communication);

}  // namespace pipeplan::schedule::internal

#endif  // PIPEPLAN_CORE_SCHEDULE_STRUCTURE_H_
