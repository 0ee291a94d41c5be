// `pipeplan simulate`: runs the schedule simulators from the command line.
//
//   pipeplan simulate --schedule 1F1B --ranks 4 --microbatches 8 [--chunks-per-rank V]
//   pipeplan simulate --csv schedule.csv [--unit-time]
//   pipeplan simulate --plan plan.json
//   pipeplan simulate --graph model.json --cluster cluster.json [plan flags]
//
// Prints the timeline and the bubble ratio, or a JSON report with --json.
// See docs/schedules.md ("Command line") for the stage times each source uses.
#ifndef PIPEPLAN_CLIENT_CLI_SIMULATE_COMMAND_H_
#define PIPEPLAN_CLIENT_CLI_SIMULATE_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flags.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::cli {

// Usage text of the command, for the CLI's help.
extern const char kSimulateUsage[];

// Plans from --graph/--cluster and the `plan` flags; main.cc supplies the same
// code path `pipeplan plan` uses.
using PlanFromFlagsFn = std::function<absl::StatusOr<v1::Plan>(const Flags&)>;

absl::Status RunSimulate(const std::vector<std::string>& args, const PlanFromFlagsFn& plan);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_SIMULATE_COMMAND_H_
