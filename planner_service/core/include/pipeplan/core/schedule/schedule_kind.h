// Names of the built-in pipeline schedules.
//
// The planner searches over schedule families; this header names them the way
// torch.distributed.pipelining's get_schedule_class does (case-insensitive on
// input) and says how many pipeline stages each family places on one rank.
#ifndef PIPEPLAN_CORE_SCHEDULE_SCHEDULE_KIND_H_
#define PIPEPLAN_CORE_SCHEDULE_SCHEDULE_KIND_H_

#include <array>
#include <string_view>

#include "absl/status/statusor.h"

namespace pipeplan::schedule {

enum class ScheduleKind {
  kGPipe,
  k1F1B,
  kInterleaved1F1B,
  kLoopedBFS,
  kInterleavedZeroBubble,  // ZB-H1 when chunks_per_rank == 1.
  kZBVZeroBubble,
  kDualPipeV,
};

inline constexpr std::array<ScheduleKind, 7> kAllScheduleKinds = {
    ScheduleKind::kGPipe,
    ScheduleKind::k1F1B,
    ScheduleKind::kInterleaved1F1B,
    ScheduleKind::kLoopedBFS,
    ScheduleKind::kInterleavedZeroBubble,
    ScheduleKind::kZBVZeroBubble,
    ScheduleKind::kDualPipeV,
};

// Accepts PyTorch's names in any letter case: "GPipe", "1F1B",
// "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble",
// "DualPipeV".
absl::StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name);
// PyTorch's spelling, e.g. "Interleaved1F1B".
std::string_view ScheduleKindName(ScheduleKind kind);

// Stages per rank: 1 for GPipe and 1F1B, `chunks_per_rank` for the looped/interleaved
// families, 2 for the V-shaped ones (ZBVZeroBubble, DualPipeV).
int StagesPerRank(ScheduleKind kind, int chunks_per_rank);

// True for the V-shaped families, whose stage s lives on rank s for s < p and
// on rank 2p-1-s otherwise; all others place stage s on rank s % p.
bool IsVShaped(ScheduleKind kind);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_SCHEDULE_KIND_H_
