// `pipeplan jobs trace JOB [--step N] --out trace.json`: the measured
// timeline of one step, every rank's actions from its step report, as Chrome
// trace JSON (the format `simulate --trace` writes the predicted one in);
// --svg FILE draws it above the step its plan predicted.
#include "jobs_trace_command.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "command.h"
#include "output_file.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/report_convert.h"
#include "pipeplan/core/chrome_trace.h"
#include "plan_table.h"
#include "simulate_command.h"
#include "timeline_svg.h"

namespace pipeplan::cli {
namespace {

// One step's reports, one per (replica, rank), and the plan version they ran.
struct ReportedStep {
  std::vector<StepSample> samples;
  int64_t plan_version = 0;
};

// The reports of `step` (the latest step every worker of its version
// reported when `step` < 0), one per (replica, rank): a re-run step keeps
// its last run.
absl::StatusOr<ReportedStep> StepOf(const v1::ListStepReportsResponse& reports, int64_t step) {
  using Worker = std::pair<int, int>;  // (replica, rank)
  std::map<int64_t, std::map<Worker, const v1::ReportStepRequest*>> by_step;
  std::map<int64_t, std::set<Worker>> workers_of_version;
  for (const v1::ReportStepRequest& r : reports.reports()) {  // oldest first
    by_step[r.step()][{r.replica(), r.rank()}] = &r;
    workers_of_version[r.plan_version()].insert({r.replica(), r.rank()});
  }
  if (step < 0) {
    for (auto it = by_step.rbegin(); it != by_step.rend() && step < 0; ++it) {
      const int64_t version = it->second.begin()->second->plan_version();
      if (it->second.size() == workers_of_version[version].size()) step = it->first;
    }
  }
  auto it = by_step.find(step);
  if (it == by_step.end()) {
    return absl::NotFoundError(step < 0 ? "the job has no step reported by every rank yet"
                                        : absl::StrCat("no reports of step ", step));
  }
  ReportedStep out;
  out.plan_version = it->second.begin()->second->plan_version();
  for (const auto& [worker, r] : it->second) out.samples.push_back(StepSampleFromProto(*r, ""));
  return out;
}

// --svg: the step above what its plan version predicted.
absl::Status WriteStepSvg(client::PlannerClient& c, const std::string& job,
                          const ReportedStep& step, const std::string& path) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, c.GetPlan(job, step.plan_version));
  PIPEPLAN_ASSIGN_OR_RETURN(std::string svg,
                            StepTraceSvg(job, step.samples, vp.plan(), step.plan_version));
  PIPEPLAN_RETURN_IF_ERROR(WriteOutputFile(path, svg, "SVG"));
  std::cout << "drew step " << step.samples.front().step << " (measured and predicted) to " << path
            << "\n";
  return absl::OkStatus();
}

absl::Status JobsTrace(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t step, ctx.flags.GetInt64("step", -1));
  const std::optional<std::string> path = ctx.flags.Get("out");
  const std::optional<std::string> svg = ctx.flags.Get("svg");
  if (!path && !svg && !ctx.flags.Has("ascii")) {
    return common::UsageError("say where the trace goes: --out FILE, --svg FILE or --ascii");
  }
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::ListStepReportsResponse reports,
                            c->ListStepReports(ctx.args[0], 10'000));
  PIPEPLAN_ASSIGN_OR_RETURN(ReportedStep reported, StepOf(reports, step));
  const std::vector<StepSample>& samples = reported.samples;
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<TraceSpan> spans, SpansOfReports(samples));
  int ranks = 0;
  for (const StepSample& s : samples) ranks = std::max(ranks, s.rank + 1);
  if (path) {
    PIPEPLAN_RETURN_IF_ERROR(WriteTextFile(
        *path, FormatChromeTrace(
                   spans, ranks,
                   absl::StrCat("measured: job ", ctx.args[0], " step ", samples.front().step))));
    std::cout << "wrote step " << samples.front().step << " (" << samples.size()
              << " workers: " << ranks << " ranks x " << samples.size() / std::max(1, ranks)
              << " replicas, " << spans.size() << " actions) to " << *path << "\n";
  }
  if (svg) PIPEPLAN_RETURN_IF_ERROR(WriteStepSvg(*c, ctx.args[0], reported, *svg));
  if (ctx.flags.Has("ascii")) std::cout << FormatGantt(spans, ranks, 100);
  return absl::OkStatus();
}

// The measured step as one panel, or one per data-parallel replica (each a
// pipeline of its own: the predicted panel below is every replica's).
std::vector<TimelinePanel> MeasuredPanels(int64_t step, std::vector<TraceSpan> measured,
                                          int ranks) {
  int replicas = 1;
  double seconds = 0;
  for (const TraceSpan& s : measured) {
    replicas = std::max(replicas, s.replica + 1);
    seconds = std::max(seconds, s.end);
  }
  std::vector<TimelinePanel> out(replicas);
  for (int q = 0; q < replicas; ++q) {
    out[q].label = absl::StrFormat("measured: step %d, %s%s", step, HumanSeconds(seconds),
                                   replicas > 1 ? absl::StrFormat(", replica %d", q) : "");
    out[q].num_ranks = ranks;
  }
  for (TraceSpan& s : measured) out[s.replica].spans.push_back(std::move(s));
  return out;
}

}  // namespace

absl::StatusOr<std::string> StepTraceSvg(const std::string& job, std::span<const StepSample> step,
                                         const v1::Plan& plan, int64_t plan_version) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<TraceSpan> measured, SpansOfReports(step));
  PIPEPLAN_ASSIGN_OR_RETURN(Scenario sc, ScenarioFromPlan(plan));
  PIPEPLAN_ASSIGN_OR_RETURN(SimulatedScenario predicted, SimulateScenario(sc, true));
  int ranks = predicted.lowered.num_ranks;
  for (const StepSample& s : step) ranks = std::max(ranks, s.rank + 1);
  const int64_t step_number = step.empty() ? 0 : step.front().step;
  std::vector<TimelinePanel> panels = MeasuredPanels(step_number, std::move(measured), ranks);
  panels.push_back(
      {absl::StrFormat("predicted by plan version %d: %s, bubble %.1f%%", plan_version,
                       HumanSeconds(predicted.sim.step_seconds), 100 * predicted.sim.bubble_ratio),
       SpansOfSimulation(predicted.sim), predicted.lowered.num_ranks});
  return TimelineSvg(
      absl::StrFormat("job %s, step %d: measured vs predicted (%s, %d microbatches)", job,
                      step_number, ScheduleDisplayName(plan.schedule()), plan.microbatches()),
      panels);
}

Command JobsTraceCommand() {
  Command c = JobCommand(
      "jobs trace", "write a step's measured per-rank timeline as Chrome trace JSON or SVG",
      "One track per rank (compute and comm threads), events named like \"F s3 mb5\".\n"
      "Open it in https://ui.perfetto.dev next to `pipeplan simulate --trace`.\n"
      "--svg draws the step above the step its plan version predicts.\n",
      JobsTrace);
  c.flags.Value("step", "N", "the step (default: the latest one every rank reported)")
      .Value("out", "FILE", "where to write the trace")
      .Value("svg", "FILE", "draw the step, above the step its plan predicted, as an SVG picture")
      .Switch("ascii", "also print the step as a terminal Gantt chart");
  return c;
}

}  // namespace pipeplan::cli
