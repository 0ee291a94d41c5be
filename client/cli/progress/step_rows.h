// A job's step reports folded into one row per step, as `jobs reports` and
// `jobs watch` show them: the planner keeps one report per worker and step,
// and these rows say how many of a step's reports arrived, so a step some
// ranks have not reported reads as partial.
#ifndef PIPEPLAN_CLIENT_CLI_PROGRESS_STEP_ROWS_H_
#define PIPEPLAN_CLIENT_CLI_PROGRESS_STEP_ROWS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::cli {

// The most reports the planner returns for one call.
inline constexpr int kMaxReports = 10'000;

// One entry per step: a re-run step (after a restart from a checkpoint)
// replaces the earlier run's entry. step_seconds, optimizer_seconds, the
// exposed all-reduce and the peak memory are the largest over the ranks; the
// memory's source says what that rank measured ("cuda_allocator",
// "cpu_allocator" or "estimate").
struct StepRow {
  int64_t plan_version = 0;
  double step_seconds = 0;
  double optimizer_seconds = 0;
  std::optional<double> allreduce_exposed_seconds;  // replicas only
  double peak_memory_bytes = 0;
  std::string peak_memory_source;
  std::optional<double> loss;
  int reports = 0;
  int expected_reports = 0;  // one per device of the version (ranks x replicas)
  bool complete() const { return reports >= expected_reports; }
};

// Rows by step from the planner's reports (oldest first).
std::map<int64_t, StepRow> StepRows(const v1::ListStepReportsResponse& reports);

// The last `steps` steps of `job`, with expected_reports set from each
// version's plan. The planner counts reports, not steps: this asks for
// enough for `steps` steps of the current version and one more, and leaves
// out the oldest step when the answer was cut and that step lacks reports
// (the cut may have taken them).
absl::StatusOr<std::map<int64_t, StepRow>> LastSteps(client::PlannerClient& c,
                                                     const std::string& job, int steps);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_PROGRESS_STEP_ROWS_H_
