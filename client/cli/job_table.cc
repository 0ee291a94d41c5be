#include "job_table.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "json_text.h"
#include "pipeplan/common/enum_names.h"
#include "plan_table.h"

namespace pipeplan::cli {
namespace {

std::string FormatTime(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms),
                          absl::LocalTimeZone());
}

constexpr auto kWorkerStateNames =
    MakeEnumNames<v1::WorkerState>("unknown", {{v1::WORKER_ACTIVE, "active"},
                                               {v1::WORKER_LOST, "lost"},
                                               {v1::WORKER_DONE, "done"},
                                               {v1::WORKER_LEFT, "left"}});
constexpr auto kJobStateNames =
    MakeEnumNames<v1::JobState>("unknown", {{v1::JOB_PENDING, "pending"},
                                            {v1::JOB_RUNNING, "running"},
                                            {v1::JOB_COMPLETED, "completed"},
                                            {v1::JOB_FAILED, "failed"},
                                            {v1::JOB_CANCELLED, "cancelled"}});

std::string FormatTraining(const v1::TrainingSpec& t) {
  return absl::StrCat(
      "  training ", t.model_package(), "\n    ", t.optimizer(), " lr ", t.lr(), ", loss ",
      t.loss(), ", data ", t.data(), ", batch ", t.batch_size(), ", max steps ", t.max_steps(),
      t.checkpoint_dir().empty()
          ? std::string()
          : absl::StrCat(", checkpoints every ", t.checkpoint_every(), " in ", t.checkpoint_dir()),
      "\n");
}

// The replica whose devices include `device` at `rank` (0 when none does).
int ReplicaOf(const v1::Plan& plan, int rank, const std::string& device) {
  for (int q = 0; q < plan.replicas_size(); ++q) {
    const auto& ids = plan.replicas(q).rank_device_ids();
    if (rank >= 0 && rank < ids.size() && ids[rank] == device) return q;
  }
  return 0;
}

// The per-rank rows; with data-parallel replicas one row per (rank,
// replica), each with its own worker and device.
std::string RankRows(const v1::JobObservation& o, const v1::Plan& plan) {
  const bool replicas = plan.replicas_size() > 1;
  std::string out = absl::StrFormat("    %4s%s %-20s %-10s %10s %10s %10s %7s %12s\n", "RANK",
                                    replicas ? " REPLICA" : "", "WORKER", "DEVICE", "STEP",
                                    "COMPUTE", "COMM", "BUBBLE", "PEAK MEM");
  for (const v1::RankObservation& r : o.ranks()) {
    const std::string replica =
        replicas ? absl::StrFormat(" %7d", ReplicaOf(plan, r.rank(), r.device_id())) : "";
    absl::StrAppendFormat(&out, "    %4d%s %-20s %-10s %10s %10s %10s %6.1f%% %12.4g\n", r.rank(),
                          replica, r.worker_id(), r.device_id(), HumanSeconds(r.step_seconds()),
                          HumanSeconds(r.compute_seconds()), HumanSeconds(r.comm_seconds()),
                          100 * r.bubble_ratio(), r.peak_memory_bytes());
  }
  return out;
}

// Measured against predicted (GetJob's observation), per job and per rank.
std::string FormatObservation(const v1::JobObservation& o, const v1::Plan& plan) {
  if (o.steps() == 0) {
    // Nothing measured yet: no figures that read as a perfect prediction.
    return absl::StrFormat("  version %d: no step measured yet (planned step %s)\n",
                           o.plan_version(), HumanSeconds(o.planned_step_seconds()));
  }
  std::string out = absl::StrFormat(
      "  version %d measured over %d steps: step %s, bubble %.1f%%\n"
      "    predicted (calibrated, as run) step %s, bubble %.1f%%; error %.1f%% "
      "(planned step %s)\n",
      o.plan_version(), o.steps(), HumanSeconds(o.measured_step_seconds()),
      100 * o.measured_bubble_ratio(), HumanSeconds(o.predicted_step_seconds()),
      100 * o.predicted_bubble_ratio(), 100 * o.prediction_error_ratio(),
      HumanSeconds(o.planned_step_seconds()));
  if (o.ranks_size() > 0) absl::StrAppend(&out, RankRows(o, plan));
  for (const v1::LinkFit& l : o.links()) {
    absl::StrAppendFormat(&out,
                          "    link %s: latency %s, bandwidth %.4g B/s, tail %s (%d transfers)\n",
                          l.scope() == "pair" ? l.src_device() + "->" + l.dst_device() : l.scope(),
                          HumanSeconds(l.latency_seconds()), l.bandwidth_bytes_per_second(),
                          HumanSeconds(l.tail_seconds()), l.samples());
  }
  for (const v1::HostTimeFit& h : o.host_times()) {
    absl::StrAppendFormat(&out,
                          "    host time per message %s: SEND %s (%d steps), RECV %s (%d steps)\n",
                          h.device_id(), HumanSeconds(h.send_seconds()), h.send_samples(),
                          HumanSeconds(h.recv_seconds()), h.recv_samples());
  }
  return out;
}

}  // namespace

std::string JobStateName(v1::JobState s) { return std::string(kJobStateNames.Name(s)); }

std::string JobStateText(const v1::Job& job) {
  const std::string state = JobStateName(job.state());
  const std::string& message = job.failure_message();
  if (message.empty()) return state;
  if (message == state || absl::StartsWith(message, state + ":")) return message;
  return absl::StrCat(state, ": ", message);
}

std::string FormatJobList(const v1::ListJobsResponse& jobs) {
  std::string out = absl::StrFormat("%-22s %-20s %-10s %8s %8s %6s  %s\n", "ID", "NAME", "STATE",
                                    "VERSION", "WORKERS", "LOST", "CREATED");
  for (const v1::Job& j : jobs.jobs()) {
    int lost = 0;
    for (const auto& w : j.workers()) lost += w.state() == v1::WORKER_LOST;
    absl::StrAppendFormat(&out, "%-22s %-20s %-10s %8d %8d %6d  %s\n", j.id(), j.name(),
                          JobStateName(j.state()), j.plan_version(), j.num_workers(), lost,
                          FormatTime(j.create_time_unix_ms()));
  }
  return out;
}

std::string FormatJob(const v1::Job& job) {
  std::string out =
      absl::StrCat("job ", job.id(), job.name().empty() ? "" : " (" + job.name() + ")",
                   "\n  state ", JobStateText(job), "\n  plan version ", job.plan_version(),
                   "\n  created ", FormatTime(job.create_time_unix_ms()), "\n");
  if (job.has_training()) absl::StrAppend(&out, FormatTraining(job.training()));
  absl::StrAppend(&out, "  workers ", job.num_workers(), "\n");
  for (const v1::WorkerStatus& w : job.workers()) {
    absl::StrAppendFormat(&out, "    %-20s %-10s rank %3d  %-7s host %s  last step %d\n",
                          w.info().worker_id(), w.info().device_id(), w.rank(),
                          kWorkerStateNames.Name(w.state()), w.info().host(), w.last_step());
  }
  if (job.has_observation())
    absl::StrAppend(&out, FormatObservation(job.observation(), job.plan()));
  absl::StrAppend(&out, "\n", FormatPlanTable(job.plan()));
  return out;
}

namespace {

// A version's prediction (made before it ran) against what it measured.
struct VersionRow {
  const v1::VersionedPlan* v = nullptr;
  double predicted = 0, p50 = 0, p90 = 0;        // 0: no stored prediction
  double measured = 0;                           // 0: no measured steps known
  double error = -1;                             // |predicted - measured| / measured
  double predicted_gain = 0, measured_gain = 0;  // over the replaced version
  bool has_gain = false;
};

// Version v's measured step: recorded by v + 1 when it was published, or
// the job's observation for the current version.
double MeasuredOf(const std::vector<v1::VersionedPlan>& versions, size_t i, const v1::Job& job) {
  if (i + 1 < versions.size()) return versions[i + 1].prediction().previous_measured_step_seconds();
  const v1::JobObservation& o = job.observation();
  if (o.plan_version() == versions[i].version() && o.steps() > 0) {
    return o.measured_step_seconds();
  }
  return 0;
}

std::vector<VersionRow> VersionRows(const std::vector<v1::VersionedPlan>& versions,
                                    const v1::Job& job) {
  std::vector<VersionRow> rows;
  for (size_t i = 0; i < versions.size(); ++i) {
    const v1::VersionPrediction& p = versions[i].prediction();
    VersionRow r{.v = &versions[i],
                 .predicted = p.step_seconds(),
                 .p50 = p.p50_step_seconds(),
                 .p90 = p.p90_step_seconds(),
                 .measured = MeasuredOf(versions, i, job)};
    if (r.predicted > 0 && r.measured > 0) {
      r.error = std::abs(r.predicted - r.measured) / r.measured;
    }
    // The decision: the gain it was predicted to bring, and the one measured.
    const double before_pred = p.previous_predicted_step_seconds();
    const double before_meas = p.previous_measured_step_seconds();
    if (r.predicted > 0 && before_pred > 0 && before_meas > 0 && r.measured > 0) {
      r.has_gain = true;
      r.predicted_gain = (before_pred - r.predicted) / before_pred;
      r.measured_gain = (before_meas - r.measured) / before_meas;
    }
    rows.push_back(r);
  }
  return rows;
}

std::string SecondsOrDash(double s) { return s > 0 ? HumanSeconds(s) : "-"; }

std::string PercentOrDash(bool known, double ratio) {
  return known ? absl::StrFormat("%.1f%%", 100 * ratio) : "-";
}

}  // namespace

std::string FormatVersions(const std::vector<v1::VersionedPlan>& versions, const v1::Job& job) {
  std::string out =
      absl::StrFormat("%7s %5s %8s %-16s %4s %10s %10s %10s %10s %10s %7s %15s  %s\n", "VERSION",
                      "RANKS", "REPLICAS", "SCHEDULE", "MB", "PLANNED", "PREDICTED", "P50", "P90",
                      "MEASURED", "ERROR", "GAIN PRED/MEAS", "REASON");
  for (const VersionRow& r : VersionRows(versions, job)) {
    const v1::Plan& plan = r.v->plan();
    const std::string gain = r.has_gain ? absl::StrCat(PercentOrDash(true, r.predicted_gain), "/",
                                                       PercentOrDash(true, r.measured_gain))
                                        : "-";
    absl::StrAppendFormat(&out, "%7d %5d %8d %-16s %4d %10s %10s %10s %10s %10s %7s %15s  %s\n",
                          r.v->version(), PlanRanks(plan), PlanReplicas(plan),
                          ScheduleDisplayName(plan.schedule()), plan.microbatches(),
                          HumanSeconds(plan.step_seconds()), SecondsOrDash(r.predicted),
                          SecondsOrDash(r.p50), SecondsOrDash(r.p90), SecondsOrDash(r.measured),
                          PercentOrDash(r.error >= 0, r.error), gain, r.v->reason());
  }
  return out;
}

std::string VersionsJson(const std::vector<v1::VersionedPlan>& versions, const v1::Job& job) {
  std::string out = "[";
  const char* sep = "";
  for (const VersionRow& r : VersionRows(versions, job)) {
    const v1::VersionedPlan& v = *r.v;
    absl::StrAppendFormat(
        &out,
        "%s\n  {\"version\": %d, \"ranks\": %d, \"replicas\": %d, \"chunks_per_rank\": %d, "
        "\"schedule\": \"%s\", "
        "\"microbatches\": %d, \"step_seconds\": %s, \"bubble_ratio\": %s, "
        "\"predicted_step_seconds\": %s, \"predicted_p50_step_seconds\": %s, "
        "\"predicted_p90_step_seconds\": %s, \"calibrated_on_version\": %d, "
        "\"measured_step_seconds\": %s, \"prediction_error_ratio\": %s, "
        "\"predicted_gain_ratio\": %s, \"measured_gain_ratio\": %s, \"trigger\": %s, "
        "\"reason\": %s}",
        sep, v.version(), PlanRanks(v.plan()), PlanReplicas(v.plan()), v.plan().chunks_per_rank(),
        ScheduleDisplayName(v.plan().schedule()), v.plan().microbatches(),
        JsonNumber(v.plan().step_seconds()), JsonNumber(v.plan().bubble_ratio()),
        JsonNumber(r.predicted), JsonNumber(r.p50), JsonNumber(r.p90),
        v.prediction().calibrated_on_version(), JsonNumber(r.measured),
        r.error >= 0 ? JsonNumber(r.error) : "null",
        r.has_gain ? JsonNumber(r.predicted_gain) : "null",
        r.has_gain ? JsonNumber(r.measured_gain) : "null", JsonString(v.prediction().trigger()),
        JsonString(v.reason()));
    sep = ",";
  }
  absl::StrAppend(&out, versions.empty() ? "]\n" : "\n]\n");
  return out;
}

}  // namespace pipeplan::cli
