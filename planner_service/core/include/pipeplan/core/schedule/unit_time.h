// Unit-time dry run of a lowered schedule, compatible with PyTorch.
//
// This reproduces torch.distributed.pipelining's _simulate_comms_compute step
// for step, so a schedule can be compared with what PyTorch's own tooling
// reports (its step count is the metric PyTorch's schedule tests use). Every
// action takes one step. In each step the ranks are visited in ascending
// order and each places its next action if ready (visible at once to higher
// ranks); then every rank left idle in that step re-checks its next action
// once. Readiness: F at s > 0 needs sRECV_Fm or (s-1)Fm already placed on its
// rank; I/B at s < last needs sRECV_Bm, (s+1)Im or (s+1)Bm; SEND_F needs sFm;
// SEND_B needs sIm or sBm; RECV_F/RECV_B need the matching SEND placed on the
// peer's rank; W is always ready. OVERLAP_F_B (which PyTorch's version does
// not accept) is ready when both halves are.
#ifndef PIPEPLAN_CORE_SCHEDULE_UNIT_TIME_H_
#define PIPEPLAN_CORE_SCHEDULE_UNIT_TIME_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"

namespace pipeplan::schedule {

struct UnitTimeResult {
  int num_ranks = 0;
  // steps[t][r]: what rank r runs at step t; std::nullopt when it waits or has
  // already finished.
  std::vector<std::vector<std::optional<Action>>> steps;
};

// A compute-only schedule whose stages span several ranks is lowered with
// InsertSendRecv first (PyTorch's simulator would simply stall on it).
absl::StatusOr<UnitTimeResult> SimulateUnitTime(const PipelineSchedule& schedule);

// One line per step, ranks separated by '|', '-' where a rank runs nothing:
//   0F0|-
//   0SEND_F0|1RECV_F0
std::string FormatUnitTimeline(const UnitTimeResult& result);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_UNIT_TIME_H_
