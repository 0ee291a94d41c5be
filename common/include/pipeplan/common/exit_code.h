// Exit codes every pipeplan binary shares (pipeplan, pipeplan-planner,
// pipeplan-worker), so scripts and service managers can decide by the code:
//
//   0  ok
//   1  runtime error (the request was understood and failed)
//   2  usage: a bad flag, flag value or argument; retrying will not help
//   3  unavailable: the planner could not be reached or did not answer in
//      time (UNAVAILABLE, DEADLINE_EXCEEDED); retrying may help
//   4  not found: the job, plan version or file named does not exist; for
//      pipeplan-worker, its job was deleted or cancelled (do not restart)
//   5  pipeplan-worker: its job failed — a training error no restart fixes
//      (bad model package or data, a diverged loss), reported with
//      FinishWorker; `jobs show` says why (do not restart)
//
// docs/cli.md lists them with the commands.
#ifndef PIPEPLAN_COMMON_EXIT_CODE_H_
#define PIPEPLAN_COMMON_EXIT_CODE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pipeplan::common {

enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,
  kExitUsage = 2,
  kExitUnavailable = 3,
  kExitNotFound = 4,
  kExitJobFailed = 5,
};

// INVALID_ARGUMENT marked (by a status payload, not by its text) as a
// command-line mistake, so it exits 2 while an INVALID_ARGUMENT from the
// planner (a bad graph) exits 1.
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

// The exit code for a command's final status (the table above).
int ExitCodeFor(const absl::Status& status);

}  // namespace pipeplan::common

#endif  // PIPEPLAN_COMMON_EXIT_CODE_H_
