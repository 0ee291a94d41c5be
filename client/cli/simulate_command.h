// `pipeplan simulate`: runs the schedule simulators from the command line.
//
//   pipeplan simulate --schedule 1F1B --ranks 4 --microbatches 8 [--chunks-per-rank V]
//   pipeplan simulate --csv schedule.csv [--unit-time]
//   pipeplan simulate --plan plan.json
//   pipeplan simulate --graph model.json --cluster cluster.json [plan flags]
//
// Prints the timeline and the bubble ratio, or a JSON report with -o json;
// --trace FILE also writes the timeline as Chrome trace JSON (the format
// `jobs trace` writes measured timelines in), --svg FILE draws it as a
// picture (timeline_svg.h), --ascii prints a Gantt chart.
// See docs/schedules.md ("Command line") for the stage times each source uses.
// SimulateCommand() (command.h) is the command; this header is what tests
// call directly.
#ifndef PIPEPLAN_CLIENT_CLI_SIMULATE_COMMAND_H_
#define PIPEPLAN_CLIENT_CLI_SIMULATE_COMMAND_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::cli {

// What gets simulated: a compute-only schedule, its stage times and where
// they came from.
struct Scenario {
  std::string source;  // schedule name, "csv" or "plan"
  schedule::PipelineSchedule schedule;
  schedule::StageCosts costs;
  int chunks_per_rank = 1;
};

// A Plan's schedule (read by the one plan decoder, DecodePlan) with its stage
// times. Communication is folded into the stage times as the planner does
// (half on the forward, half on the backward-input); the Plan does not carry
// the weight-gradient share, so W is taken as half of the backward.
absl::StatusOr<Scenario> ScenarioFromPlan(const v1::Plan& plan);

// A scenario's schedule lowered with the SEND/RECV PyTorch would issue (when
// its stages span ranks), and its simulated step.
struct SimulatedScenario {
  schedule::PipelineSchedule lowered;
  schedule::SimulationResult sim;
};
// `record_timeline`: keep every action's times (SimulateOptions), which the
// --trace, --svg and --ascii pictures draw.
absl::StatusOr<SimulatedScenario> SimulateScenario(const Scenario& scenario, bool record_timeline);

// Writes `text` to `path`, with the errors of output_file.h (NOT_FOUND for a
// missing folder).
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_SIMULATE_COMMAND_H_
