#include "progress/step_rows.h"

#include <algorithm>

#include "pipeplan/common/status_macros.h"
#include "plan_table.h"

namespace pipeplan::cli {
namespace {

// Devices (ranks x replicas) of each plan version the rows ran, from the
// planner; a version it no longer has counts the reports there are.
absl::Status SetExpectedReports(client::PlannerClient& c, const std::string& job,
                                std::map<int64_t, StepRow>* rows) {
  std::map<int64_t, int> devices;
  for (auto& [step, row] : *rows) {
    if (!devices.contains(row.plan_version)) {
      absl::StatusOr<v1::VersionedPlan> vp = c.GetPlan(job, row.plan_version);
      if (!vp.ok() && vp.status().code() != absl::StatusCode::kNotFound) return vp.status();
      devices[row.plan_version] =
          vp.ok() ? PlanRanks(vp->plan()) * PlanReplicas(vp->plan()) : row.reports;
    }
    row.expected_reports = devices[row.plan_version];
  }
  return absl::OkStatus();
}

}  // namespace

std::map<int64_t, StepRow> StepRows(const v1::ListStepReportsResponse& reports) {
  std::map<int64_t, StepRow> rows;
  for (const v1::ReportStepRequest& r : reports.reports()) {  // oldest first
    StepRow& row = rows[r.step()];
    if (row.plan_version != r.plan_version()) row = StepRow{r.plan_version()};
    row.step_seconds = std::max(row.step_seconds, r.step_seconds());
    row.optimizer_seconds = std::max(row.optimizer_seconds, r.optimizer_seconds());
    if (r.has_allreduce_exposed_seconds()) {
      row.allreduce_exposed_seconds =
          std::max(row.allreduce_exposed_seconds.value_or(0), r.allreduce_exposed_seconds());
    }
    if (r.peak_memory_bytes() >= row.peak_memory_bytes) {
      row.peak_memory_bytes = r.peak_memory_bytes();
      row.peak_memory_source = r.peak_memory_source();
    }
    if (r.has_loss()) row.loss = r.loss();
    ++row.reports;
  }
  return rows;
}

absl::StatusOr<std::map<int64_t, StepRow>> LastSteps(client::PlannerClient& c,
                                                     const std::string& job, int steps) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan current, c.GetPlan(job, 0));
  const int64_t per_step = PlanRanks(current.plan()) * PlanReplicas(current.plan());
  const int wanted = static_cast<int>(std::min<int64_t>(kMaxReports, (steps + 1) * per_step));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::ListStepReportsResponse reports, c.ListStepReports(job, wanted));
  std::map<int64_t, StepRow> rows = StepRows(reports);
  PIPEPLAN_RETURN_IF_ERROR(SetExpectedReports(c, job, &rows));
  // A cut answer may have left out the oldest step's first reports.
  const bool cut = reports.reports_size() >= wanted;
  if (cut && !rows.empty() && !rows.begin()->second.complete()) rows.erase(rows.begin());
  while (static_cast<int>(rows.size()) > steps) rows.erase(rows.begin());
  return rows;
}

}  // namespace pipeplan::cli
