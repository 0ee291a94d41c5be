// Event-driven simulation of a pipeline schedule with real durations.
//
// This is what the planner's search loop uses to score a (partition,
// schedule) candidate, so it is linear in the number of actions and allocates
// only flat arrays. Semantics (see docs/schedules.md):
//   * each rank issues its actions in program order; compute is serial, so a
//     compute action starts when the rank is free and its inputs are ready;
//   * SEND is non-blocking: it is posted when the rank reaches it and never
//     occupies the rank;
//   * RECV is posted when the rank reaches it and also never occupies the
//     rank; the transfer starts once both the SEND and the RECV are posted
//     (NCCL-style rendezvous, no look-ahead) and lasts the boundary's transfer
//     time; the consuming compute waits for it;
//   * a compute-only schedule (no SEND/RECV) is simulated as if every cross-
//     rank output were sent right after it is produced and received early;
//   * hops between two stages on the same rank are free.
// Memory is counted in program order: a microbatch's activations for a stage
// are held from its F until its backward-input (I or B) completes; W is
// assumed to need nothing beyond what is already counted.
#ifndef PIPEPLAN_CORE_SCHEDULE_SIMULATOR_H_
#define PIPEPLAN_CORE_SCHEDULE_SIMULATOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/action.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan::schedule {

struct TimelineEvent {
  int rank = 0;
  int step = 0;  // index of the action in the rank's program
  Action action;
  // Compute: when it runs. SEND: posted at `start`; `end` is the earliest its
  // data can land. RECV: posted at `start`, data in place at `end`.
  double start = 0;
  double end = 0;
};

struct SimulationResult {
  double step_seconds = 0;             // makespan of one training step
  std::vector<double> busy_seconds;    // per rank, compute only
  std::vector<double> idle_seconds;    // per rank: step_seconds - busy
  std::vector<double> finish_seconds;  // per rank: end of its last compute
  // Per rank: when its end work (ComputeSharing::rank_end_seconds) ended;
  // empty without end work.
  std::vector<double> end_work_finish_seconds;
  double bubble_ratio = 0;                      // sum(idle) / (ranks * step_seconds)
  std::vector<int> peak_inflight_microbatches;  // per rank, over all its stages
  std::vector<int> peak_inflight_per_stage;     // per stage
  std::vector<double> peak_memory_bytes;        // per rank: params + activations
  std::vector<TimelineEvent> timeline;          // only with record_timeline
};

struct SimulateOptions {
  bool record_timeline = false;
};

// Validates the schedule (as ValidateSchedule does) while simulating it, so a
// broken schedule yields the same error.
absl::StatusOr<SimulationResult> Simulate(const PipelineSchedule& schedule, const StageCosts& costs,
                                          const SimulateOptions& options = {});

// Text timeline in the style of PyTorch's _format_pipeline_order: one row per
// distinct start time, one column per rank, e.g.
//   Step 00 [t=0.000000]: 0F0       -
//   Step 01 [t=1.000000]: 0SEND_F0  1RECV_F0+1F0
// Actions a rank starts at the same instant are joined with '+'. Needs a
// result simulated with record_timeline.
std::string FormatTimeline(const SimulationResult& result, int num_ranks);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_SIMULATOR_H_
