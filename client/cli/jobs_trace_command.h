// `pipeplan jobs trace JOB`: one step's measured per-rank timeline, from the
// workers' step reports, as Chrome trace JSON (--out), a terminal Gantt
// chart (--ascii) or a picture above the step its plan predicted (--svg).
// JobsTraceCommand() (command.h) is the command; this header is what tests
// call directly, without a planner.
#ifndef PIPEPLAN_CLIENT_CLI_JOBS_TRACE_COMMAND_H_
#define PIPEPLAN_CLIENT_CLI_JOBS_TRACE_COMMAND_H_

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::cli {

// The --svg picture (timeline_svg.h) of job `job`'s step: its reports (one
// per rank, as SpansOfReports reads them) in a "measured" panel above the
// step `plan` predicts (as `simulate --plan` simulates it), on one time
// scale. Errors: those of SpansOfReports and of reading and simulating the
// plan (INVALID_ARGUMENT).
absl::StatusOr<std::string> StepTraceSvg(const std::string& job, std::span<const StepSample> step,
                                         const v1::Plan& plan, int64_t plan_version);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_JOBS_TRACE_COMMAND_H_
