#include "pipeplan/core/schedule/inflight.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "rank_program.h"

namespace pipeplan::schedule {

absl::StatusOr<int> PeakInflightMicrobatches(ScheduleKind kind, int stage, int num_stages,
                                             int microbatches, int chunks_per_rank) {
  const int per_rank = StagesPerRank(kind, chunks_per_rank);
  if (per_rank < 1 || num_stages < 1 || num_stages % per_rank != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s with chunks_per_rank=%d places %d stages per rank; %d stages is not a multiple",
        ScheduleKindName(kind), chunks_per_rank, per_rank, num_stages));
  }
  const int ranks = num_stages / per_rank;
  if (stage < 0 || stage >= num_stages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("stage %d is out of range [0, %d)", stage, num_stages));
  }
  if (absl::Status st = internal::CheckBuildParameters(kind, ranks, microbatches, chunks_per_rank);
      !st.ok()) {
    return st;
  }
  switch (kind) {
    case ScheduleKind::kGPipe:
    case ScheduleKind::kLoopedBFS:
      return microbatches;
    case ScheduleKind::k1F1B:
      return std::min(microbatches, ranks - stage);
    default:
      break;
  }
  const int rank =
      IsVShaped(kind) ? (stage < ranks ? stage : 2 * ranks - 1 - stage) : stage % ranks;
  int inflight = 0;
  int peak = 0;
  auto apply = [&](const Action& a) {
    if (a.stage != stage) return;
    if (a.type == ActionType::kForward) {
      peak = std::max(peak, ++inflight);
    } else if (a.type == ActionType::kBackwardInput || a.type == ActionType::kFullBackward) {
      --inflight;
    }
  };
  for (const std::optional<Action>& slot :
       internal::BuildRankProgram(kind, rank, ranks, microbatches, chunks_per_rank)) {
    if (slot) ForEachHalf(*slot, apply);
  }
  return peak;
}

}  // namespace pipeplan::schedule
