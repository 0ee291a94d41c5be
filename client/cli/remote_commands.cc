#include "remote_commands.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "flags.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/status_macros.h"
#include "plan_table.h"
#include "request_flags.h"
#include "training_flags.h"

namespace pipeplan::cli {

const char kRemoteUsage[] = R"(
global flags (before the command):
  --planner ADDR      talk to a running pipeplan-planner (e.g. 127.0.0.1:7600)
  --tls-ca FILE       PEM CA of the planner's certificate (enables TLS)
  --tls-cert FILE     client certificate for mutual TLS (with --tls-key)
  --tls-key FILE
  --token-file FILE   bearer token (first line of FILE)
  --timeout S         per-call timeout in seconds (60)

remote commands (need --planner):
  plan ...                      as above, solved by the planner
  jobs create [--name N] <plan flags> [training flags] [--json]
                                create a job; prints its id and plan version 1
      training flags (workers with --executor torch train the model):
        --model-package DIR     pipeplan_export.py --package output (checked against --graph)
        --data tensors:FILE|synthetic:seed=N   --batch-size B (rows per step)
        --optimizer sgd|adam|adamw (adamw)  --lr X (1e-3)  --weight-decay X
        --momentum X (sgd)  --clip-grad-norm X  --loss cross_entropy|mse
        --max-steps N  --checkpoint-dir DIR  --checkpoint-every N
        --dtype float32|float64  --skip-nonfinite-steps
  jobs list [--json]
  jobs show ID [--version V] [--json]
                                the job, its workers and current (or V-th) plan
  jobs reports ID [--limit N] [--json]
                                per step: step, plan version, loss, step seconds
  jobs delete ID
)";

absl::StatusOr<GlobalFlags> ParseGlobalFlags(std::vector<std::string>* args) {
  GlobalFlags g;
  static const std::set<std::string> kNames = {"planner", "tls-ca",     "tls-cert",
                                               "tls-key", "token-file", "timeout"};
  size_t i = 0;
  while (i < args->size() && (*args)[i].rfind("--", 0) == 0) {
    std::string name = (*args)[i].substr(2), value;
    if (name == "help") break;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (!kNames.count(name)) break;  // not a global flag: let the command complain
    if (eq == std::string::npos) {
      if (i + 1 >= args->size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = (*args)[++i];
    }
    ++i;
    if (name == "planner") g.planner = value;
    if (name == "tls-ca") g.tls_ca = value;
    if (name == "tls-cert") g.tls_cert = value;
    if (name == "tls-key") g.tls_key = value;
    if (name == "token-file") g.token_file = value;
    if (name == "timeout" &&
        (!absl::SimpleAtod(value, &g.timeout_seconds) || !(g.timeout_seconds > 0))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--timeout wants positive seconds, got \"", value, "\""));
    }
  }
  args->erase(args->begin(), args->begin() + static_cast<long>(i));
  return g;
}

namespace {

absl::StatusOr<std::unique_ptr<client::PlannerClient>> Connect(const GlobalFlags& g) {
  if (g.planner.empty()) {
    return absl::InvalidArgumentError("this command needs --planner ADDR before it");
  }
  client::ClientOptions o;
  o.address = g.planner;
  o.tls_ca_file = g.tls_ca;
  o.tls_cert_file = g.tls_cert;
  o.tls_key_file = g.tls_key;
  o.token_file = g.token_file;
  o.timeout = absl::Seconds(g.timeout_seconds);
  return client::PlannerClient::Connect(o);
}

std::string FormatTime(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms),
                          absl::LocalTimeZone());
}

const char* StateName(v1::WorkerState s) {
  switch (s) {
    case v1::WORKER_ACTIVE:
      return "active";
    case v1::WORKER_LOST:
      return "lost";
    case v1::WORKER_DONE:
      return "done";
    default:
      return "unknown";
  }
}

const char* JobStateName(v1::JobState s) {
  switch (s) {
    case v1::JOB_RUNNING:
      return "running";
    case v1::JOB_SUCCEEDED:
      return "succeeded";
    case v1::JOB_FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

std::string FormatTraining(const v1::TrainingSpec& t) {
  return absl::StrCat(
      "  training ", t.model_package(), "\n    ", t.optimizer(), " lr ", t.lr(), ", loss ",
      t.loss(), ", data ", t.data(), ", batch ", t.batch_size(), ", max steps ", t.max_steps(),
      t.checkpoint_dir().empty()
          ? std::string()
          : absl::StrCat(", checkpoints every ", t.checkpoint_every(), " in ", t.checkpoint_dir()),
      "\n");
}

absl::Status JobsCreate(client::PlannerClient& c, const std::vector<std::string>& args) {
  std::set<std::string> valued = PlanRequestFlagNames();
  valued.insert("name");
  valued.insert(TrainingFlagNames().begin(), TrainingFlagNames().end());
  std::set<std::string> switches = TrainingSwitchNames();
  switches.insert("json");
  PIPEPLAN_ASSIGN_OR_RETURN(Flags flags,
                            Flags::Parse(args, valued, switches, DeprecatedPlanFlagNames()));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest req, RequestFromFlags(flags));
  PIPEPLAN_ASSIGN_OR_RETURN(std::optional<v1::TrainingSpec> training,
                            TrainingSpecFromFlags(flags, req.graph()));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, c.CreateJob(flags.Get("name").value_or(""), req,
                                                     training.value_or(v1::TrainingSpec())));
  if (flags.Has("json")) {
    std::cout << ToJson(job) << "\n";
  } else {
    std::cout << "created job " << job.id() << " (plan version " << job.plan_version() << ")\n\n"
              << FormatPlanTable(job.plan());
  }
  return absl::OkStatus();
}

absl::Status JobsList(client::PlannerClient& c, const std::vector<std::string>& args) {
  PIPEPLAN_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {}, {"json"}));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::ListJobsResponse jobs, c.ListJobs());
  if (flags.Has("json")) {
    std::cout << ToJson(jobs) << "\n";
    return absl::OkStatus();
  }
  std::cout << absl::StrFormat("%-22s %-20s %8s %8s %6s  %s\n", "ID", "NAME", "VERSION", "WORKERS",
                               "LOST", "CREATED");
  for (const v1::Job& j : jobs.jobs()) {
    int lost = 0;
    for (const auto& w : j.workers()) lost += w.state() == v1::WORKER_LOST;
    std::cout << absl::StrFormat("%-22s %-20s %8d %8d %6d  %s\n", j.id(), j.name(),
                                 j.plan_version(), j.num_workers(), lost,
                                 FormatTime(j.create_time_unix_ms()));
  }
  return absl::OkStatus();
}

absl::Status JobsShow(client::PlannerClient& c, const std::vector<std::string>& args) {
  PIPEPLAN_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"version"}, {"json"}));
  if (flags.positionals().size() != 1) {
    return absl::InvalidArgumentError("usage: pipeplan jobs show ID [--version V] [--json]");
  }
  const std::string& id = flags.positionals()[0];
  PIPEPLAN_ASSIGN_OR_RETURN(int version, flags.GetInt("version", 0));
  if (version > 0) {
    PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, c.GetPlan(id, version));
    if (flags.Has("json")) {
      std::cout << ToJson(vp) << "\n";
    } else {
      std::cout << "job " << id << " plan version " << vp.version() << " (" << vp.reason()
                << ")\n\n"
                << FormatPlanTable(vp.plan());
    }
    return absl::OkStatus();
  }
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, c.GetJob(id));
  if (flags.Has("json")) {
    std::cout << ToJson(job) << "\n";
    return absl::OkStatus();
  }
  std::cout << "job " << job.id() << (job.name().empty() ? "" : " (" + job.name() + ")")
            << "\n  state " << JobStateName(job.state())
            << (job.failure_message().empty() ? "" : ": " + job.failure_message())
            << "\n  plan version " << job.plan_version() << "\n  created "
            << FormatTime(job.create_time_unix_ms()) << "\n";
  if (job.has_training()) std::cout << FormatTraining(job.training());
  std::cout << "  workers " << job.num_workers() << "\n";
  for (const v1::WorkerStatus& w : job.workers()) {
    std::cout << absl::StrFormat("    %-20s %-10s rank %3d  %-7s host %s  last step %d\n",
                                 w.info().worker_id(), w.info().device_id(), w.rank(),
                                 StateName(w.state()), w.info().host(), w.last_step());
  }
  std::cout << "\n" << FormatPlanTable(job.plan());
  return absl::OkStatus();
}

// One entry per step: a re-run step (after a restart from a checkpoint)
// replaces the earlier run's entry. step_seconds is the slowest rank's.
struct StepRow {
  int64_t plan_version = 0;
  double step_seconds = 0;
  std::optional<double> loss;
  int reports = 0;
};

std::map<int64_t, StepRow> StepRows(const v1::ListStepReportsResponse& reports) {
  std::map<int64_t, StepRow> rows;
  for (const v1::ReportStepRequest& r : reports.reports()) {  // oldest first
    StepRow& row = rows[r.step()];
    if (row.plan_version != r.plan_version()) row = StepRow{r.plan_version()};
    row.step_seconds = std::max(row.step_seconds, r.step_seconds());
    if (r.has_loss()) row.loss = r.loss();
    ++row.reports;
  }
  return rows;
}

absl::Status JobsReports(client::PlannerClient& c, const std::vector<std::string>& args) {
  PIPEPLAN_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"limit"}, {"json"}));
  if (flags.positionals().size() != 1) {
    return absl::InvalidArgumentError("usage: pipeplan jobs reports ID [--limit N] [--json]");
  }
  PIPEPLAN_ASSIGN_OR_RETURN(int limit, flags.GetInt("limit", 10'000));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::ListStepReportsResponse reports,
                            c.ListStepReports(flags.positionals()[0], limit));
  const std::map<int64_t, StepRow> rows = StepRows(reports);
  if (flags.Has("json")) {
    std::cout << "[";
    const char* sep = "";
    for (const auto& [step, row] : rows) {
      std::cout << sep << "\n  {\"step\": " << step << ", \"plan_version\": " << row.plan_version
                << ", \"loss\": " << (row.loss ? absl::StrCat(*row.loss) : "null")
                << ", \"step_seconds\": " << absl::StrCat(row.step_seconds)
                << ", \"reports\": " << row.reports << "}";
      sep = ",";
    }
    std::cout << (rows.empty() ? "]\n" : "\n]\n");
    return absl::OkStatus();
  }
  std::cout << absl::StrFormat("%8s %8s %14s %12s\n", "STEP", "VERSION", "LOSS", "SECONDS");
  for (const auto& [step, row] : rows) {
    std::cout << absl::StrFormat("%8d %8d %14s %12.6f\n", step, row.plan_version,
                                 row.loss ? absl::StrFormat("%.6g", *row.loss) : "-",
                                 row.step_seconds);
  }
  return absl::OkStatus();
}

absl::Status JobsDelete(client::PlannerClient& c, const std::vector<std::string>& args) {
  PIPEPLAN_ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {}, {}));
  if (flags.positionals().size() != 1) {
    return absl::InvalidArgumentError("usage: pipeplan jobs delete ID");
  }
  PIPEPLAN_RETURN_IF_ERROR(c.DeleteJob(flags.positionals()[0]));
  std::cout << "deleted job " << flags.positionals()[0] << "\n";
  return absl::OkStatus();
}

}  // namespace

absl::Status RunRemotePlan(const GlobalFlags& global, const std::vector<std::string>& args) {
  std::set<std::string> valued = PlanRequestFlagNames();
  PIPEPLAN_ASSIGN_OR_RETURN(Flags flags,
                            Flags::Parse(args, valued, {"json"}, DeprecatedPlanFlagNames()));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest req, RequestFromFlags(flags));
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(global));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Plan plan, c->Plan(req));
  if (flags.Has("json")) {
    std::cout << ToJson(plan) << "\n";
  } else {
    std::cout << "graph " << req.graph().name() << ": " << req.graph().nodes_size() << " nodes, "
              << req.graph().edges_size() << " edges; cluster of " << req.cluster().devices_size()
              << " devices (planned by " << global.planner << ")\n\n"
              << FormatPlanTable(plan);
  }
  return absl::OkStatus();
}

absl::Status RunJobs(const GlobalFlags& global, const std::vector<std::string>& args) {
  if (args.empty()) {
    return absl::InvalidArgumentError(
        "usage: pipeplan --planner ADDR jobs create|list|show|reports|delete");
  }
  PIPEPLAN_ASSIGN_OR_RETURN(auto c, Connect(global));
  const std::string sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "create") return JobsCreate(*c, rest);
  if (sub == "list") return JobsList(*c, rest);
  if (sub == "show") return JobsShow(*c, rest);
  if (sub == "delete") return JobsDelete(*c, rest);
  if (sub == "reports") return JobsReports(*c, rest);
  return absl::InvalidArgumentError(absl::StrCat("unknown jobs subcommand \"", sub,
                                                 "\"; want create, list, show, reports or delete"));
}

}  // namespace pipeplan::cli
