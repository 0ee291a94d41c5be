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
  std::vector<double> busy_seconds;  // per rank
  double makespan = 0;
  std::vector<TimelineEvent> timeline;
};

// Expects a schedule that passed CheckStructure(schedule, has_communication)
// and, if given, costs that passed CheckStageCosts. `costs` may be null.
absl::StatusOr<EngineRun> Execute(const PipelineSchedule& schedule, bool has_communication,
                                  const StageCosts* costs, bool record_timeline);

}  // namespace pipeplan::schedule::internal

#endif  // PIPEPLAN_CORE_SCHEDULE_ENGINE_H_
