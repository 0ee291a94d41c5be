// The dependency-driven executor behind Simulate and ValidateSchedule.
//
// It runs every rank's program in order, each rank as far as its inputs
// allow, and hands a blocked rank back to the work list when the event it
// waits for happens. Each action is therefore executed once and each event
// wakes at most one rank: linear time, which the planner's search loop needs.
// With no costs every duration is zero and only the ordering is checked.
#ifndef PIPEPLAN_CORE_SCHEDULE_ENGINE_H_
#define PIPEPLAN_CORE_SCHEDULE_ENGINE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan::schedule::internal {

struct EngineRun {
  std::vector<double> busy_seconds;             // per rank
  std::vector<double> finish_seconds;           // per rank: end of its last compute
  std::vector<double> end_work_finish_seconds;  // SharedEngine's, with end work
  double makespan = 0;
  std::vector<TimelineEvent> timeline;
};

// Expects a schedule that passed CheckStructure(schedule, has_communication)
// and, if given, costs that passed CheckStageCosts. `costs` may be null.
absl::StatusOr<EngineRun> Execute(const PipelineSchedule& schedule, bool has_communication,
                                  const StageCosts* costs, bool record_timeline);

// The run of ranks that all finished: per rank its busy seconds and its clock
// (when it was free again); `last_arrival` is the latest RECV end. The
// makespan is the latest of the clocks and `last_arrival`.
EngineRun FinishedRun(std::vector<double> busy, std::vector<double> clock, double last_arrival,
                      std::vector<TimelineEvent> timeline);

// Simulate without the fast path: CheckStructure, CheckStageCosts, Execute and
// a separate memory count. Reference for the differential tests.
absl::StatusOr<SimulationResult> SimulateChecked(const PipelineSchedule& schedule,
                                                 const StageCosts& costs,
                                                 const SimulateOptions& options);

// Simulate's fast path: executes the schedule, checks its structure (as
// CheckStructure does) and counts memory (as the simulator documents) in one
// pass over flat per-stage and per-(stage, microbatch) arrays reused across
// calls on a thread. Expects CheckHeader and CheckStageCosts to have passed.
// Returns false, leaving `out` unspecified, on anything unusual (a structural
// problem, a deadlock); the caller then takes the checked path, which reports
// the precise error. Fills every SimulationResult field except the timeline.
bool SimulateFast(const PipelineSchedule& schedule, const StageCosts& costs, SimulationResult& out);

// Fills the memory fields of `out` (peak in-flight microbatches per rank and
// per stage, peak bytes per rank). Activation accounting depends only on each
// rank's program order, not on durations, so it is a separate linear pass that
// every simulator shares. Expects a schedule that passed CheckStructure and
// costs that passed CheckStageCosts.
void CountMemory(const PipelineSchedule& s, const StageCosts& costs, SimulationResult& out);

// The SimulationResult of an executed run: its times, idle and bubble from
// them, and CountMemory. Same expectations as CountMemory.
SimulationResult ResultOf(const PipelineSchedule& schedule, const StageCosts& costs, EngineRun run);

}  // namespace pipeplan::schedule::internal

#endif  // PIPEPLAN_CORE_SCHEDULE_ENGINE_H_
