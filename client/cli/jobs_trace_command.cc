// `pipeplan jobs trace JOB [--step N] --out trace.json`: the measured
// timeline of one step, every rank's actions from its step report, as Chrome
// trace JSON (the format `simulate --trace` writes the predicted one in).
#include <iostream>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "command.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/report_convert.h"
#include "pipeplan/core/chrome_trace.h"
#include "simulate_command.h"

namespace pipeplan::cli {
namespace {

// The reports of `step` (the latest step every rank of its version reported
// when `step` < 0), one per rank: a re-run step keeps its last run.
absl::StatusOr<std::vector<StepSample>> StepOf(const v1::ListStepReportsResponse& reports,
                                               int64_t step) {
  std::map<int64_t, std::map<int, const v1::ReportStepRequest*>> by_step;
  std::map<int64_t, std::set<int>> ranks_of_version;
  for (const v1::ReportStepRequest& r : reports.reports()) {  // oldest first
    by_step[r.step()][r.rank()] = &r;
    ranks_of_version[r.plan_version()].insert(r.rank());
  }
  if (step < 0) {
    for (auto it = by_step.rbegin(); it != by_step.rend() && step < 0; ++it) {
      const int64_t version = it->second.begin()->second->plan_version();
      if (it->second.size() == ranks_of_version[version].size()) step = it->first;
    }
  }
  auto it = by_step.find(step);
  if (it == by_step.end()) {
    return absl::NotFoundError(step < 0 ? "the job has no step reported by every rank yet"
                                        : absl::StrCat("no reports of step ", step));
  }
  std::vector<StepSample> out;
  for (const auto& [rank, r] : it->second) out.push_back(StepSampleFromProto(*r, ""));
  return out;
}

absl::Status JobsTrace(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t step, ctx.flags.GetInt64("step", -1));
  const std::optional<std::string> path = ctx.flags.Get("out");
  if (!path && !ctx.flags.Has("ascii")) {
    return common::UsageError("say where the trace goes: --out FILE (or --ascii)");
  }
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::ListStepReportsResponse reports,
                            c->ListStepReports(ctx.args[0], 10'000));
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StepSample> samples, StepOf(reports, step));
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<TraceSpan> spans, SpansOfReports(samples));
  const int ranks = static_cast<int>(samples.size());
  if (path) {
    PIPEPLAN_RETURN_IF_ERROR(WriteTextFile(
        *path, FormatChromeTrace(
                   spans, ranks,
                   absl::StrCat("measured: job ", ctx.args[0], " step ", samples.front().step))));
    std::cout << "wrote step " << samples.front().step << " (" << ranks << " ranks, "
              << spans.size() << " actions) to " << *path << "\n";
  }
  if (ctx.flags.Has("ascii")) std::cout << FormatGantt(spans, ranks, 100);
  return absl::OkStatus();
}

}  // namespace

Command JobsTraceCommand() {
  Command c;
  c.words = "jobs trace";
  c.arguments = "JOB";
  c.num_arguments = 1;
  c.summary = "write a step's measured per-rank timeline as Chrome trace JSON";
  c.details =
      "One track per rank (compute and comm threads), events named like \"F s3 mb5\".\n"
      "Open it in https://ui.perfetto.dev next to `pipeplan simulate --trace`.\n";
  c.flags.Value("step", "N", "the step (default: the latest one every rank reported)")
      .Value("out", "FILE", "where to write the trace")
      .Switch("ascii", "also print the step as a terminal Gantt chart");
  c.run = JobsTrace;
  return c;
}

}  // namespace pipeplan::cli
