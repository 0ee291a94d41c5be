// `pipeplan jobs reports|versions|replan`: what a job ran and planned, and a
// new plan version on demand (the lifecycle: jobs_commands.cc).
#include <algorithm>
#include <charconv>
#include <iostream>
#include <map>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "command.h"
#include "job_table.h"
#include "json_text.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/proto_convert.h"
#include "plan_table.h"
#include "progress/step_rows.h"
#include "request_flags.h"

namespace pipeplan::cli {
namespace {

bool Json(const CommandContext& ctx) { return ctx.global.output == Output::kJson; }

// The shortest text that reads back as the same double: float64 runs are
// compared with the reference to 1e-9 and better.
std::string ExactNumber(double x) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc() ? std::string(buf, end) : absl::StrCat(x);
}

std::string StepRowsJson(const std::map<int64_t, StepRow>& rows) {
  std::string out = "[";
  const char* sep = "";
  for (const auto& [step, row] : rows) {
    absl::StrAppend(
        &out, sep, "\n  {\"step\": ", step, ", \"plan_version\": ", row.plan_version,
        ", \"loss\": ", row.loss ? ExactNumber(*row.loss) : "null",
        ", \"step_seconds\": ", absl::StrCat(row.step_seconds),
        ", \"optimizer_seconds\": ", absl::StrCat(row.optimizer_seconds),
        ", \"allreduce_exposed_seconds\": ",
        row.allreduce_exposed_seconds ? absl::StrCat(*row.allreduce_exposed_seconds) : "null",
        ", \"peak_memory_bytes\": ", absl::StrCat(row.peak_memory_bytes),
        ", \"peak_memory_source\": \"", row.peak_memory_source, "\"",
        ", \"reports\": ", row.reports, ", \"expected_reports\": ", row.expected_reports,
        ", \"complete\": ", row.reports >= row.expected_reports ? "true" : "false", "}");
    sep = ",";
  }
  absl::StrAppend(&out, rows.empty() ? "]\n" : "\n]\n");
  return out;
}

std::string StepRowsTable(const std::map<int64_t, StepRow>& rows) {
  std::string out =
      absl::StrFormat("%8s %8s %14s %12s %12s %12s %12s %8s %s\n", "STEP", "VERSION", "LOSS",
                      "SECONDS", "OPTIMIZER", "ALLREDUCE", "PEAK MEM", "REPORTS", "MEASURED BY");
  for (const auto& [step, row] : rows) {
    // A step some ranks have not reported (yet) says so: its seconds are
    // the reported ranks' only.
    const bool partial = row.reports < row.expected_reports;
    absl::StrAppendFormat(
        &out, "%8d %8d %14s %12.6f %12.6f %12s %12.4g %8s %s\n", step, row.plan_version,
        row.loss ? absl::StrFormat("%.6g", *row.loss) : "-", row.step_seconds,
        row.optimizer_seconds,
        row.allreduce_exposed_seconds ? absl::StrFormat("%.6f", *row.allreduce_exposed_seconds)
                                      : "-",
        row.peak_memory_bytes, absl::StrCat(row.reports, "/", row.expected_reports),
        partial ? "(partial)" : (row.peak_memory_source.empty() ? "-" : row.peak_memory_source));
  }
  return out;
}

absl::Status JobsReports(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(int limit, ctx.flags.GetInt("limit", kMaxReports));
  if (limit < 1) return common::UsageError("--limit wants a positive number of steps");
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  PIPEPLAN_ASSIGN_OR_RETURN(auto rows, LastSteps(*c, ctx.args[0], limit));
  std::cout << (Json(ctx) ? StepRowsJson(rows) : StepRowsTable(rows));
  return absl::OkStatus();
}

absl::Status JobsVersions(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, c->GetJob(ctx.args[0]));
  std::vector<v1::VersionedPlan> versions;
  for (int64_t v = 1; v <= job.plan_version(); ++v) {
    PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, c->GetPlan(job.id(), v));
    versions.push_back(std::move(vp));
  }
  std::cout << (Json(ctx) ? VersionsJson(versions, job) : FormatVersions(versions, job));
  return absl::OkStatus();
}

absl::Status JobsReplan(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  v1::ReplanJobRequest request;
  request.set_job_id(ctx.args[0]);
  request.set_reason(ctx.flags.Get("reason").value_or("replan requested (pipeplan jobs replan)"));
  if (HasOptionFlags(ctx.flags)) {
    // The flags change the current version's options; the rest stay.
    PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan current, c->GetPlan(ctx.args[0], 0));
    *request.mutable_options() = current.request().options();
    PIPEPLAN_RETURN_IF_ERROR(ApplyOptionFlags(ctx.flags, request.mutable_options()));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan next, c->ReplanJob(request));
  if (Json(ctx)) {
    std::cout << ToJson(next) << "\n";
  } else {
    std::cout << "job " << next.job_id() << " plan version " << next.version() << " ("
              << next.reason() << ")\n\n"
              << FormatPlanTable(next.plan());
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<Command> JobHistoryCommands() {
  std::vector<Command> out;
  out.push_back(
      JobCommand("jobs reports", "per step: plan version, loss, step seconds", "", JobsReports));
  out.back().flags.Value("limit", "N",
                         "the most recent N steps (all the planner keeps, up to 10000\n"
                         "reports); a step not every rank reported reads partial");
  out.push_back(JobCommand(
      "jobs versions", "every plan version of the job and why it was published", "", JobsVersions));
  out.push_back(
      JobCommand("jobs replan", "solve the job again and publish the next plan version",
                 "Plan options given here (e.g. --ranks 2) replace those of the current version;\n"
                 "the others keep their values. Without any, the same request is solved again.\n"
                 "Workers switch to the new version at their next step boundary.\n",
                 JobsReplan));
  out.back().flags.Value("reason", "TEXT", "kept with the version (`jobs versions`)");
  out.back().flags.Include(PlanOptionFlags());
  return out;
}

}  // namespace pipeplan::cli
