// `pipeplan jobs create|list|show|cancel|delete`: the job lifecycle on a
// running planner (the plan history and reports: jobs_history_commands.cc).
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "command.h"
#include "job_table.h"
#include "json_text.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/proto_convert.h"
#include "plan_table.h"
#include "request_flags.h"
#include "training_flags.h"

namespace pipeplan::cli {
namespace {

bool Json(const CommandContext& ctx) { return ctx.global.output == Output::kJson; }

absl::Status JobsCreate(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest req, RequestFromFlags(ctx.flags));
  PIPEPLAN_ASSIGN_OR_RETURN(std::optional<v1::TrainingSpec> training,
                            TrainingSpecFromFlags(ctx.flags, req.graph()));
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, c->CreateJob(ctx.flags.Get("name").value_or(""), req,
                                                      training.value_or(v1::TrainingSpec())));
  if (Json(ctx)) {
    std::cout << ToJson(job) << "\n";
  } else {
    std::cout << "created job " << job.id() << " (plan version " << job.plan_version() << ")\n\n"
              << FormatPlanTable(job.plan());
  }
  return absl::OkStatus();
}

absl::Status JobsList(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::ListJobsResponse jobs, c->ListJobs());
  // Protobuf's JSON leaves an empty list out ("{}"); scripts read .jobs.
  if (Json(ctx)) {
    std::cout << (jobs.jobs().empty() ? "{\"jobs\": []}" : ToJson(jobs)) << "\n";
  } else {
    std::cout << FormatJobList(jobs);
  }
  return absl::OkStatus();
}

absl::Status JobsShow(const CommandContext& ctx) {
  const std::string& id = ctx.args[0];
  PIPEPLAN_ASSIGN_OR_RETURN(int version, ctx.flags.GetInt("version", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  if (version > 0) {
    PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, c->GetPlan(id, version));
    if (Json(ctx)) {
      std::cout << ToJson(vp) << "\n";
    } else {
      std::cout << "job " << id << " plan version " << vp.version() << " (" << vp.reason()
                << ")\n\n"
                << FormatPlanTable(vp.plan());
    }
    return absl::OkStatus();
  }
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, c->GetJob(id));
  std::cout << (Json(ctx) ? ToJson(job) + "\n" : FormatJob(job));
  return absl::OkStatus();
}

absl::Status JobsCancel(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job,
                            c->CancelJob(ctx.args[0], ctx.flags.Get("reason").value_or("")));
  if (Json(ctx)) {
    std::cout << ToJson(job) << "\n";
  } else {
    std::cout << "job " << job.id() << " " << JobStateText(job) << "\n";
  }
  return absl::OkStatus();
}

absl::Status JobsDelete(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(ctx.global));
  PIPEPLAN_RETURN_IF_ERROR(c->DeleteJob(ctx.args[0]));
  if (Json(ctx)) {
    std::cout << "{\"job_id\": " << JsonString(ctx.args[0]) << ", \"deleted\": true}\n";
  } else {
    std::cout << "deleted job " << ctx.args[0] << "\n";
  }
  return absl::OkStatus();
}

Command Create() {
  Command c =
      MakeCommand("jobs create", "create a job; prints its id and plan version 1",
                  "Workers (pipeplan-worker --job ID) attach to the job and run its plan. With\n"
                  "--model-package the workers train that model (training flags).\n",
                  JobsCreate);
  c.flags.Value("name", "NAME", "a name to show in `jobs list`");
  c.flags.Include(PlanInputFlags()).Include(PlanOptionFlags()).Include(TrainingFlags());
  return c;
}

Command Show() {
  Command c = JobCommand("jobs show", "the job, its workers and current (or --version V) plan", "",
                         JobsShow);
  c.flags.Value("version", "V", "show plan version V (0 or absent: the current one)");
  return c;
}

Command Cancel() {
  Command c =
      JobCommand("jobs cancel", "stop a running job and keep its plans and reports",
                 "Its workers stop (exit code 4, like a deleted job); `jobs show` and\n"
                 "`jobs reports` still work until `jobs delete`. Cancelling again is OK; a job\n"
                 "that already succeeded or failed is FAILED_PRECONDITION (exit code 1).\n",
                 JobsCancel);
  c.flags.Value("reason", "TEXT", "kept with the job (\"cancelled: TEXT\")");
  return c;
}

}  // namespace

std::vector<Command> JobLifecycleCommands() {
  std::vector<Command> out;
  out.push_back(Create());
  out.push_back(MakeCommand("jobs list", "every job: state, plan version, workers", "", JobsList));
  out.push_back(Show());
  out.push_back(Cancel());
  out.push_back(JobCommand("jobs delete", "delete a job, its plans and reports; its workers stop",
                           "", JobsDelete));
  return out;
}

}  // namespace pipeplan::cli
