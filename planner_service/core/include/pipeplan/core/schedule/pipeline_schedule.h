// The pipeline schedule container shared by every schedule pass.
//
// A PipelineSchedule is what the runtime executes: for every rank the ordered
// list of actions it issues, plus the stage-to-rank placement that decides
// which dependencies cross ranks (and so need SEND/RECV) and which are local.
// It is either compute-only (as produced by BuildSchedule or written by a user)
// or lowered, i.e. with the communication actions InsertSendRecv adds.
#ifndef PIPEPLAN_CORE_SCHEDULE_PIPELINE_SCHEDULE_H_
#define PIPEPLAN_CORE_SCHEDULE_PIPELINE_SCHEDULE_H_

#include <optional>
#include <vector>

#include "pipeplan/core/schedule/action.h"

namespace pipeplan::schedule {

// One rank's program. std::nullopt is an idle slot (PyTorch's None); slots
// only matter to passes that work in lock-step rounds (InsertSendRecv, the
// unit-time simulator), never to the dependency semantics.
using RankProgram = std::vector<std::optional<Action>>;

struct PipelineSchedule {
  int num_ranks = 0;
  int num_stages = 0;
  int num_microbatches = 0;
  std::vector<int> stage_to_rank;     // size num_stages
  std::vector<RankProgram> programs;  // size num_ranks

  // True if any rank issues a SEND/RECV action.
  bool HasCommunication() const;
  // Number of non-idle actions over all ranks.
  int NumActions() const;
};

// Stage s on rank s % ranks (GPipe, 1F1B, interleaved and looped schedules).
std::vector<int> LoopedStageToRank(int ranks, int stages);
// Stage s on rank s for s < ranks, on rank 2*ranks-1-s otherwise; the last rank
// holds the two middle stages, so that hop is local.
std::vector<int> VShapeStageToRank(int ranks);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_PIPELINE_SCHEDULE_H_
