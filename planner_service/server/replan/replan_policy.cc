#include "pipeplan/server/replan/replan_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "calibrated_model.h"
#include "contingency_plans.h"
#include "gain_threshold.h"
#include "membership_decision.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/convert/report_convert.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/core/runtime_model.h"
#include "pipeplan/core/step_spread.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/obs/metrics.h"
#include "pipeplan/server/replan/live_devices.h"
#include "pipeplan/server/replan/version_prediction.h"
#include "replan_inputs.h"
#include "replan_reasons.h"

namespace pipeplan::server {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// How long a replan waits for room in the solve memory budget.
constexpr absl::Duration kBudgetWait = absl::Seconds(30);

bool Gone(const v1::WorkerStatus& w) {
  return w.state() == v1::WORKER_LOST || w.state() == v1::WORKER_LEFT;
}

// Devices with a rank whose every worker is lost or left: what Tick replans
// without.
std::set<std::string> LostRankDevices(const v1::Job& job) {
  std::set<std::string> active_devices, lost_devices;
  for (const v1::WorkerStatus& w : job.workers()) {
    if (!Gone(w)) active_devices.insert(w.info().device_id());
  }
  for (const v1::WorkerStatus& w : job.workers()) {
    if (Gone(w) && w.rank() >= 0 && !active_devices.contains(w.info().device_id())) {
      lost_devices.insert(w.info().device_id());
    }
  }
  return lost_devices;
}

// Devices of live workers that have no rank in the current plan (a worker
// that joined or came back): what a scale-up replan could add.
std::set<std::string> JoinedDevices(const v1::Job& job) {
  std::set<std::string> ranked, joined;
  for (const v1::WorkerStatus& w : job.workers()) {
    if (w.rank() >= 0) ranked.insert(w.info().device_id());
  }
  for (const v1::WorkerStatus& w : job.workers()) {
    if (w.state() == v1::WORKER_ACTIVE && !ranked.contains(w.info().device_id())) {
      joined.insert(w.info().device_id());
    }
  }
  return joined;
}

const char* TriggerName(ReplanTrigger trigger) {
  switch (trigger) {
    case ReplanTrigger::kWorkerLost:
      return "worker_lost";
    case ReplanTrigger::kWorkerJoined:
      return "worker_joined";
    default:
      return "calibration";
  }
}

// No plan fits (memory) or the solve failed: the current plan stays.
void LogReplanFailed(const std::string& job_id, const std::string& version, ReplanTrigger trigger,
                     const absl::Status& error) {
  LogWarn("replan_failed", {{"job", job_id},
                            {"plan_version", version},
                            {"trigger", TriggerName(trigger)},
                            {"error", std::string(error.message())}});
}

// A device of the plan without an estimate yet (lost ones need none).
std::optional<std::string> DeviceWithoutFactor(const DecodedPlan& plan,
                                               const CalibrationResult& est,
                                               const LostDevices& lost) {
  const std::set<std::string> plan_devices(plan.rank_devices.begin(), plan.rank_devices.end());
  for (const std::string& d : plan_devices) {
    const bool is_lost =
        std::find(lost.devices.begin(), lost.devices.end(), d) != lost.devices.end();
    if (!est.Find(d) && !is_lost) return d;
  }
  return std::nullopt;
}

// Why calibrating under `model` cannot go on: reports that do not match the
// plan, a device without enough reports. nullopt: go on.
std::optional<std::string> CalibrationSkip(const CalibratedModel& model, const DecodedPlan& current,
                                           const LostDevices& lost) {
  if (!model.estimate.ok()) {
    return absl::StrCat("reports do not match the plan: ", model.estimate.status().message());
  }
  if (std::optional<std::string> d = DeviceWithoutFactor(current, *model.estimate, lost)) {
    return absl::StrCat("not enough reports for device ", *d);
  }
  return std::nullopt;
}

// The calibration gauges of a job's devices.
void ShowFactors(Metrics* metrics, const std::string& job_id, const CalibrationResult& est) {
  if (metrics == nullptr) return;
  for (const DeviceFactor& f : est.devices) {
    metrics->SetCalibrationFactor(job_id, f.device_id, f.time_factor);
  }
}

// What the next planned switch is expected to cost, from the switch into
// `version`: the longest pause a rank reported with its first step of it,
// less the time it waited for its stages to compile (a planned switch
// compiles in the background). Workers that report no pause (older ones)
// are timed by the gap between their last step of an earlier version and
// their first of `version`, which also counts compilation and, after a lost
// worker, the lease that noticed it. 0 when no switch is in the reports.
double MeasuredSwitchSeconds(const std::vector<v1::ReportStepRequest>& reports, int64_t version) {
  double reported = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> ends;  // worker -> (last old end, first new)
  for (const v1::ReportStepRequest& r : reports) {
    if (r.plan_version() == version && r.switch_seconds() > 0) {
      reported = std::max(
          reported,
          std::max(0.0, r.switch_seconds() - std::max(0.0, r.switch_compile_wait_seconds())));
    }
    if (r.start_unix_us() <= 0) continue;
    auto& [old_end, new_start] = ends[r.worker_id()];
    if (r.plan_version() < version) {
      old_end = std::max(old_end, r.start_unix_us() + static_cast<int64_t>(r.step_seconds() * 1e6));
    } else if (r.plan_version() == version) {
      new_start = new_start == 0 ? r.start_unix_us() : std::min(new_start, r.start_unix_us());
    }
  }
  if (reported > 0) return reported;
  double out = 0;
  for (const auto& [worker, e] : ends) {
    if (e.first > 0 && e.second > e.first) {
      out = std::max(out, static_cast<double>(e.second - e.first) * 1e-6);
    }
  }
  return out;
}

// Steps a switch now would pay off over: the policy's horizon, or fewer when
// the job trains to max_steps and fewer are left.
int HorizonSteps(const v1::Job& job, const ReplanPolicyOptions& options) {
  const int64_t max_steps = job.training().max_steps();
  if (max_steps <= 0) return options.horizon_steps;
  int64_t done = 0;
  for (const v1::WorkerStatus& w : job.workers()) done = std::max(done, w.last_step() + 1);
  return static_cast<int>(std::clamp<int64_t>(max_steps - done, 1, options.horizon_steps));
}

double PredictedGain(const ReplanOutcome& o) {
  const double cur = o.current_step_seconds;
  return std::isinf(cur) ? 1.0 : (cur - o.new_step_seconds) / cur;
}

// A worker with a rank in the current version that finished training
// (WORKER_DONE): the job is ending. Its peers finish the same step a moment
// later; until then its device is not live, and a replan over the rest
// would publish a smaller plan nobody trains on.
const v1::WorkerStatus* FinishedRankWorker(const v1::Job& job) {
  for (const v1::WorkerStatus& w : job.workers()) {
    if (w.rank() >= 0 && w.state() == v1::WORKER_DONE) return &w;
  }
  return nullptr;
}

// Why an evaluation has nothing to do: the job is ending, the lost or
// joined worker it was for is gone, or every worker is away (e.g. the
// planner was down longer than a lease: keep the plan, they reconnect to
// it). nullopt: go on.
std::optional<std::string> NothingToReplan(ReplanTrigger trigger, const v1::Job& job,
                                           const v1::VersionedPlan& vp, const LostDevices& lost,
                                           const std::set<std::string>& joined) {
  if (const v1::WorkerStatus* done = FinishedRankWorker(job)) {
    return absl::StrCat("worker ", done->info().worker_id(), " finished training at step ",
                        done->last_step() + 1, ": the job is ending");
  }
  // A worker the current version already left out (lost before it was
  // published) is no reason for another version. Otherwise a survivor that
  // misses a lease and is back before this evaluation turns it into a
  // calibration replan outside --replan-min-interval-seconds (and outside
  // --replan=membership), and every rank pays a switch. The same test as
  // Tick's trigger.
  if (trigger == ReplanTrigger::kWorkerLost && LostRankDevices(job).empty()) {
    return "no lost worker has a rank in the current version";
  }
  if (trigger == ReplanTrigger::kWorkerJoined && joined.empty()) {
    return "no worker without a rank left";
  }
  if (!job.workers().empty() &&
      static_cast<int>(lost.devices.size()) >= vp.request().cluster().devices_size()) {
    return "no device has a live worker";
  }
  return std::nullopt;
}

// Why the predicted gain does not pay: below the relative minimum, or (when
// `floor_applies`) below the absolute floor, since a few percent of a tiny
// step does not pay for the switch (workers pause to reconnect and move
// state). nullopt: it pays.
std::optional<std::string> GainTooSmall(const ReplanOutcome& outcome,
                                        const ReplanPolicyOptions& options, bool floor_applies,
                                        const std::vector<v1::ReportStepRequest>& reports,
                                        const v1::Job& job, int64_t version) {
  const double gain = PredictedGain(outcome);
  if (!(gain > options.min_gain)) {
    return absl::StrFormat("predicted gain %.1f%% (%.4g s -> %.4g s) is not above %.1f%%",
                           gain * 100, outcome.current_step_seconds, outcome.new_step_seconds,
                           options.min_gain * 100);
  }
  if (!floor_applies) return std::nullopt;
  const double seconds = outcome.current_step_seconds - outcome.new_step_seconds;
  const double measured = MeasuredSwitchSeconds(reports, version);
  const int horizon = HorizonSteps(job, options);
  const double floor = MinGainSeconds(options, measured, horizon);
  if (seconds > floor) return std::nullopt;
  return absl::StrFormat(
      "predicted gain %.4g s per step is not above %.4g s (the floor, or a %.3g s switch over %d "
      "steps)",
      seconds, floor, measured > 0 ? measured : options.assumed_switch_seconds, horizon);
}

}  // namespace

double MinGainSeconds(const ReplanPolicyOptions& options, double measured_switch_seconds,
                      int horizon_steps) {
  const double switch_seconds =
      measured_switch_seconds > 0 ? measured_switch_seconds : options.assumed_switch_seconds;
  const int horizon = horizon_steps > 0 ? horizon_steps : options.horizon_steps;
  return std::max(options.min_gain_seconds, switch_seconds / std::max(1, horizon));
}

ReplanPolicy::ReplanPolicy(JobRegistry* registry, SolvePool* pool, const Clock* clock,
                           ReplanPolicyOptions options, Metrics* metrics, MemoryBudget* budget)
    : registry_(registry),
      pool_(pool),
      budget_(budget),
      clock_(clock),
      options_(options),
      metrics_(metrics) {}

absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> ReplanPolicy::ReserveMemory(
    const v1::PlanRequest& request) {
  if (budget_ == nullptr) return nullptr;
  return budget_->Reserve(EstimateSolveBytes(request, static_cast<int64_t>(request.ByteSizeLong())),
                          kBudgetWait);
}

void ReplanPolicy::ForgetDeletedJobsLocked(const std::vector<v1::Job>& jobs) {
  std::set<std::string> live;
  for (const v1::Job& j : jobs) live.insert(j.id());
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (!live.contains(it->first) && !it->second.in_flight) {
      if (metrics_) metrics_->RemoveJob(it->first);
      jobs_.erase(it++);
    } else {
      ++it;
    }
  }
}

bool ReplanPolicy::CalibrationDue(const v1::Job& job, JobState& st,
                                  const ReplanPolicyOptions& options) {
  bool due = false;
  for (const v1::WorkerStatus& w : job.workers()) {
    if (w.rank() < 0 || w.state() == v1::WORKER_LOST) continue;
    auto [it, inserted] = st.baseline_step.emplace(w.info().worker_id(), w.last_step());
    due = true;
    if (w.last_step() - it->second < options.min_steps + options.warmup_steps) return false;
  }
  return due;
}

void ReplanPolicy::StartVersion(const v1::Job& job, JobState& st) {
  if (st.version == job.plan_version()) return;
  st.version = job.plan_version();
  st.baseline_step.clear();
  st.lost_tried.clear();
  st.joined_tried.clear();
  for (const v1::WorkerStatus& w : job.workers()) {
    st.baseline_step[w.info().worker_id()] = w.last_step();
  }
}

std::optional<ReplanTrigger> ReplanPolicy::TriggerFor(const v1::Job& job, JobState& st,
                                                      const std::set<std::string>& lost_devices,
                                                      const std::set<std::string>& joined,
                                                      absl::Time now) const {
  auto untried = [](const std::set<std::string>& devices, const std::vector<std::string>& tried) {
    return std::any_of(devices.begin(), devices.end(), [&](auto& d) {
      return std::find(tried.begin(), tried.end(), d) == tried.end();
    });
  };
  if (untried(lost_devices, st.lost_tried)) return ReplanTrigger::kWorkerLost;
  if (lost_devices.empty() && untried(joined, st.joined_tried)) {
    return ReplanTrigger::kWorkerJoined;
  }
  if (options_.calibrate && lost_devices.empty() &&
      now - st.last_evaluation >= options_.min_interval && CalibrationDue(job, st, options_)) {
    return ReplanTrigger::kCalibration;
  }
  return std::nullopt;
}

bool ReplanPolicy::SubmitEvaluation(const std::string& id, ReplanTrigger t) {
  absl::Status admitted = pool_->Submit([this, id, t] {
    absl::StatusOr<ReplanOutcome> outcome = Evaluate(id, t);
    if (!outcome.ok() && outcome.status().code() != absl::StatusCode::kNotFound) {
      LogWarn("replan_error", {{"job", id}, {"error", std::string(outcome.status().message())}});
    }
    absl::MutexLock lock(&mu_);
    if (auto it = jobs_.find(id); it != jobs_.end()) it->second.in_flight = false;
  });
  return admitted.ok();  // pool full or stopping: try again next tick
}

int ReplanPolicy::Tick() {
  if (!options_.enabled) return 0;
  const std::vector<v1::Job> jobs = registry_->ListJobs();
  const absl::Time now = clock_->Now();
  absl::MutexLock l(&mu_);
  ForgetDeletedJobsLocked(jobs);
  int submitted = 0;
  for (const v1::Job& job : jobs) {
    // An ended job gets no new versions (a cancelled one cannot, and one that
    // completed or failed would send its waiting workers a plan nobody runs).
    if (job.state() != v1::JOB_RUNNING && job.state() != v1::JOB_PENDING) continue;
    if (!registry_->Owns(job.id())) continue;  // another replica's to replan
    JobState& st = jobs_[job.id()];
    StartVersion(job, st);
    if (st.in_flight) continue;
    const std::set<std::string> lost_devices = LostRankDevices(job);
    const std::set<std::string> joined = JoinedDevices(job);
    const std::optional<ReplanTrigger> trigger = TriggerFor(job, st, lost_devices, joined, now);
    if (!trigger && lost_devices.empty() && ContingenciesDue(job, st, now) &&
        SubmitContingencies(job.id())) {
      st.contingency_in_flight = true;
      st.contingency_version = job.plan_version();
      st.contingency_at = now;
    }
    if (!trigger || !SubmitEvaluation(job.id(), *trigger)) continue;
    st.in_flight = true;
    if (*trigger == ReplanTrigger::kWorkerLost) {
      st.lost_tried.assign(lost_devices.begin(), lost_devices.end());
    } else if (*trigger == ReplanTrigger::kWorkerJoined) {
      st.joined_tried.assign(joined.begin(), joined.end());
    } else {
      st.last_evaluation = now;
    }
    ++submitted;
  }
  return submitted;
}

// What one evaluation has read and fitted by the time it plans.
struct ReplanPolicy::Evaluation {
  std::string job_id;
  ReplanTrigger trigger;
  v1::VersionedPlan vp;
  v1::Job job;
  std::string version;  // vp's version as text, for the logs
  LostDevices lost;
  std::set<std::string> joined;
  DecodedPlan current;  // empty when the current plan cannot be read
  bool readable = false;
  // The version's recent reports (switch times) and its calibrated model.
  std::vector<v1::ReportStepRequest> reports;
  CalibratedModel model;
  CalibrationResult estimate;  // the model's, empty when it has none
  std::string factors_text;    // "gpu0:1.000,gpu1:2.010" once estimated
  bool calibrating() const { return trigger == ReplanTrigger::kCalibration; }
};

ReplanOutcome ReplanPolicy::Unchanged(const Evaluation& e, ReplanOutcome outcome, std::string why) {
  outcome.reason = std::move(why);
  LogInfo("replan_skipped", {{"job", e.job_id},
                             {"plan_version", e.version},
                             {"reason", outcome.reason},
                             {"factors", e.factors_text}});
  return outcome;
}

absl::StatusOr<ReplanOutcome> ReplanPolicy::Evaluate(const std::string& job_id,
                                                     ReplanTrigger trigger) {
  Evaluation e{.job_id = job_id, .trigger = trigger};
  PIPEPLAN_ASSIGN_OR_RETURN(e.vp, registry_->GetPlan(job_id, 0));
  PIPEPLAN_ASSIGN_OR_RETURN(e.job, registry_->GetJob(job_id));
  e.version = absl::StrCat(e.vp.version());
  e.lost = FindLostDevices(e.job, e.vp.request().cluster());
  e.joined = JoinedDevices(e.job);
  if (std::optional<std::string> why = NothingToReplan(trigger, e.job, e.vp, e.lost, e.joined)) {
    return Unchanged(e, {}, *std::move(why));
  }
  // The current plan, read as every other reader reads it. One that does not
  // decode cannot be calibrated, but a lost worker is still replanned.
  absl::StatusOr<DecodedPlan> read = DecodePlan(e.vp.plan());
  if (!read.ok() && e.calibrating()) {
    return Unchanged(e, {},
                     absl::StrCat("cannot read the current plan: ", read.status().message()));
  }
  e.readable = read.ok();
  if (e.readable) e.current = *std::move(read);

  // Step 1: the calibrated model from the reports of the current version.
  PIPEPLAN_ASSIGN_OR_RETURN(
      e.reports, registry_->RecentStepReports(job_id, options_.report_window, kMaxSampleBytes));
  PIPEPLAN_ASSIGN_OR_RETURN(e.model,
                            BuildCalibratedModel(*registry_, e.job, e.vp, e.current,
                                                 {.report_window = options_.report_window,
                                                  .warmup_steps = options_.warmup_steps,
                                                  .min_device_samples = options_.min_steps}));
  if (e.model.estimate.ok()) e.estimate = *e.model.estimate;
  e.factors_text = FactorsText(e.estimate);
  ShowFactors(metrics_, job_id, e.estimate);
  if (e.calibrating()) {
    if (std::optional<std::string> why = CalibrationSkip(e.model, e.current, e.lost)) {
      return Unchanged(e, {}, *std::move(why));
    }
  }
  return Replan(e);
}

absl::StatusOr<ReplanOutcome> ReplanPolicy::Replan(const Evaluation& e) {
  ReplanOutcome outcome;
  // Step 2: a new plan under the calibrated model, without lost devices. Not
  // finding one (the memory budget, the solver) is the outcome, not an error.
  auto no_plan = [&](const absl::Status& why) {
    LogReplanFailed(e.job_id, e.version, e.trigger, why);
    outcome.reason = absl::StrCat("no plan: ", why.message());
    return outcome;
  };
  absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> memory = ReserveMemory(e.vp.request());
  if (!memory.ok()) return no_plan(memory.status());
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in,
                            CalibratedInputs(e.vp.request(), e.model, e.lost, options_));
  absl::StatusOr<PlanResult> result = MakePlan(*in.graph, *in.cluster, in.options);
  if (!result.ok()) return no_plan(result.status());
  v1::Plan next = PlanToProto(*in.graph, *in.cluster, *result);
  outcome.new_step_seconds = AsRunStep(next, result->step_seconds, in, e.model);

  // A loss planned ahead publishes that plan while it still fits: the
  // workers compiled its stages already.
  const bool planned_ahead =
      e.trigger == ReplanTrigger::kWorkerLost && UseContingency(e, in, next, outcome);

  // Step 3: the current plan under the same model; publish when it pays.
  absl::StatusOr<double> cur = ScoreUnder(e.current, e.readable, in, e.model);
  if (!cur.ok() && e.calibrating()) {
    return Unchanged(e, outcome,
                     absl::StrCat("cannot score the current plan: ", cur.status().message()));
  }
  outcome.current_step_seconds = cur.ok() ? *cur : kInf;
  // A membership change publishes by its own rule (membership_decision.h);
  // a calibration replan needs both gains and must beat the measured noise
  // (gain_threshold.h).
  std::optional<std::string> why =
      IsMembershipTrigger(e.trigger)
          ? MembershipSkip(e.trigger, outcome, next, e.joined, e.vp.plan().calibration())
          : GainTooSmall(outcome, options_, /*floor_applies=*/true, e.reports, e.job,
                         e.vp.version());
  if (!why && e.calibrating()) why = NoiseBlocks(e, outcome);
  if (why) return Unchanged(e, outcome, *std::move(why));
  const std::string reason = VersionReason(e.trigger, e.estimate, e.joined, e.lost, outcome);
  // A contingency carries the calibration it was planned under.
  if (!planned_ahead) {
    next = WithCalibration(std::move(next), *in.cluster, e.model, e.lost, outcome);
  }
  const std::optional<v1::VersionPrediction> prediction = Predict(e, next, in);
  absl::StatusOr<ReplanOutcome> published = Publish(e.job_id, e.vp, next, reason, e.trigger,
                                                    outcome, prediction ? &*prediction : nullptr);
  if (!published.ok() && published.status().code() == absl::StatusCode::kAborted) {
    return Unchanged(e, outcome, std::string(published.status().message()));
  }
  return published;
}

bool ReplanPolicy::UseContingency(const Evaluation& e, const PlanInputs& in, v1::Plan& next,
                                  ReplanOutcome& outcome) const {
  const v1::ContingencyPlan* c = FindContingency(e.vp, e.lost.devices);
  if (c == nullptr) return false;
  const double planned = AsRunStep(c->plan(), kInf, in, e.model);
  const bool fits =
      ContingencyStillFits(planned, outcome.new_step_seconds, options_.contingency_slack);
  LogInfo(fits ? "contingency_used" : "contingency_stale",
          {{"job", e.job_id},
           {"plan_version", e.version},
           {"lost", absl::StrJoin(e.lost.devices, ",")},
           {"contingency_step_seconds", absl::StrCat(planned)},
           {"fresh_step_seconds", absl::StrCat(outcome.new_step_seconds)}});
  if (!fits) return false;
  next = c->plan();
  outcome.new_step_seconds = planned;
  return true;
}

std::optional<std::string> ReplanPolicy::NoiseBlocks(const Evaluation& e,
                                                     const ReplanOutcome& outcome) const {
  const std::vector<double> steps = StepMakespans(e.model.samples, e.current.num_ranks);
  const double p50 = QuantileOr(steps, 0.5, 0);
  const double noise = p50 > 0 ? (QuantileOr(steps, 0.9, p50) - p50) / p50 : 0;
  return GainWithinNoise({.current_step_seconds = outcome.current_step_seconds,
                          .new_step_seconds = outcome.new_step_seconds,
                          .noise_ratio = noise,
                          .measured_steps = static_cast<int>(steps.size())},
                         options_.noise_factor);
}

std::optional<v1::VersionPrediction> ReplanPolicy::Predict(const Evaluation& e,
                                                           const v1::Plan& next,
                                                           const PlanInputs& in) const {
  PredictionBasis basis{.current_version = e.vp.version(),
                        .current = e.readable ? &e.current : nullptr,
                        .samples = &e.model.samples,
                        .host = &e.model.host,
                        .stage_fit = &e.model.stage_fit,
                        .cpu_pools = &e.model.cpu_pools,
                        .spread = e.model.spread,
                        .trigger = TriggerName(e.trigger),
                        .switch_seconds = MeasuredSwitchSeconds(e.reports, e.vp.version()),
                        .horizon_steps = HorizonSteps(e.job, options_)};
  absl::StatusOr<v1::VersionPrediction> p = PredictVersion(next, in, basis);
  if (p.ok()) return *std::move(p);
  LogWarn("prediction_failed", {{"job", e.job_id},
                                {"plan_version", e.version},
                                {"error", std::string(p.status().message())}});
  return std::nullopt;
}

absl::StatusOr<ReplanOutcome> ReplanPolicy::Publish(const std::string& job_id,
                                                    const v1::VersionedPlan& current,
                                                    const v1::Plan& next, const std::string& reason,
                                                    ReplanTrigger trigger, ReplanOutcome outcome,
                                                    const v1::VersionPrediction* prediction) {
  PIPEPLAN_ASSIGN_OR_RETURN(
      outcome.version, registry_->PublishPlan(job_id, current.request(), next, reason,
                                              current.version(), PublishAs::kOwner, prediction));
  if (metrics_) metrics_->CountReplan(TriggerName(trigger));
  outcome.published = true;
  outcome.reason = reason;
  return outcome;
}

}  // namespace pipeplan::server
