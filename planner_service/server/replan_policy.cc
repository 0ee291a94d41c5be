#include "pipeplan/server/replan_policy.h"

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
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/convert/report_convert.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/core/runtime_model.h"
#include "pipeplan/server/calibrated_model.h"
#include "pipeplan/server/live_devices.h"
#include "pipeplan/server/log.h"
#include "pipeplan/server/metrics.h"

namespace pipeplan::server {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// How long a replan waits for room in the solve memory budget.
constexpr absl::Duration kBudgetWait = absl::Seconds(30);

std::string Ratio(double rel) {
  return rel >= 1 ? absl::StrFormat("%.1fx slower", rel) : absl::StrFormat("%.1fx faster", 1 / rel);
}

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

// "gpu0:1.000,gpu1:2.010": what a replan_skipped log line carries.
std::string FactorsText(const CalibrationResult& est) {
  std::string text;
  for (const DeviceFactor& f : est.devices) {
    absl::StrAppendFormat(&text, "%s%s:%.3f", text.empty() ? "" : ",", f.device_id, f.time_factor);
  }
  return text;
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

// Calibration from the reports of the current plan version: the estimate,
// and, when calibrating, why it cannot go on (reports that do not match the
// plan, a device without enough reports).
struct Estimate {
  CalibrationResult result;
  std::string skip;
};

absl::StatusOr<Estimate> EstimateFactors(const std::vector<StepSample>& samples,
                                         const DecodedPlan& current, const LostDevices& lost,
                                         bool calibrating, const ReplanPolicyOptions& options) {
  absl::StatusOr<CalibrationResult> est = EstimateDeviceFactors(
      samples, current.PlannedStages(),
      {.warmup_steps = options.warmup_steps, .min_samples = std::max(1, options.min_steps)});
  if (!est.ok()) {
    if (!calibrating) return Estimate{};
    return Estimate{.skip =
                        absl::StrCat("reports do not match the plan: ", est.status().message())};
  }
  Estimate out{.result = *std::move(est)};
  if (calibrating) {
    if (std::optional<std::string> d = DeviceWithoutFactor(current, out.result, lost)) {
      out.skip = absl::StrCat("not enough reports for device ", *d);
    }
  }
  return out;
}

// The factors a replan plans with: the current plan's own, updated by the
// estimate; devices with neither get `default_factor`.
struct DeviceFactors {
  std::map<std::string, double> by_device;
  std::map<std::string, int> samples;
  double default_factor = 1;
};

DeviceFactors MergeFactors(const std::map<std::string, double>& prior,
                           const CalibrationResult& est) {
  DeviceFactors out{.by_device = prior};
  for (const DeviceFactor& f : est.devices) {
    out.by_device[f.device_id] = f.time_factor;
    out.samples[f.device_id] = f.samples;
  }
  if (!est.devices.empty()) {
    out.default_factor = est.median_factor;
  } else if (!prior.empty()) {
    std::vector<double> v;
    for (const auto& [d, f] : prior) v.push_back(f);
    out.default_factor = MedianOr(std::move(v), 1);
  }
  return out;
}

// The job's request as MakePlan inputs under the calibrated cluster, ranks
// and replicas capped at the devices left, the solve time capped by the
// policy.
absl::StatusOr<PlanInputs> CalibratedInputs(const v1::PlanRequest& request,
                                            const DeviceFactors& factors,
                                            const LinkCalibration& links, const LostDevices& lost,
                                            const ReplanPolicyOptions& options) {
  PIPEPLAN_ASSIGN_OR_RETURN(
      v1::PlanRequest calibrated,
      CalibratedRequest(request, factors.by_device, factors.default_factor, lost.devices, links));
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, PlanInputs::FromRequest(calibrated, options.limits));
  FitToDevices(in);
  const double limit = in.options.time_limit_seconds > 0 ? in.options.time_limit_seconds : 10.0;
  in.options.time_limit_seconds = std::max(0.01, std::min(limit, options.max_solve_seconds));
  return in;
}

// Step seconds of a plan under the calibrated model, simulated as the
// workers run it (transfers overlap compute), so the current and the new
// plan compare as they will be measured: infinite when it cannot run there
// (unreadable, or a stage on a device that is gone). Each device's measured
// host time per message (host_overhead.h) goes with it into either plan.
absl::StatusOr<double> ScoreUnder(const DecodedPlan& plan, bool readable, const PlanInputs& in,
                                  const HostOverhead& host) {
  if (!readable) return kInf;
  absl::StatusOr<FixedPlan> fixed = FixedPlanOf(plan, *in.cluster, in.options);
  if (!fixed.ok() && fixed.status().code() == absl::StatusCode::kNotFound) return kInf;
  PIPEPLAN_RETURN_IF_ERROR(fixed.status());
  PIPEPLAN_ASSIGN_OR_RETURN(AsRunResult score,
                            SimulateAsRun(*in.graph, *in.cluster, *fixed, {.host_overhead = host}));
  return score.simulation.step_seconds;
}

// The new plan's step simulated as run (ScoreUnder), or the solver's own
// figure when the plan cannot be read back or scored.
double AsRunStep(const v1::Plan& plan, double solver_step, const PlanInputs& in,
                 const HostOverhead& host) {
  absl::StatusOr<DecodedPlan> decoded = DecodePlan(plan);
  if (!decoded.ok()) return solver_step;
  absl::StatusOr<double> as_run = ScoreUnder(*decoded, true, in, host);
  return as_run.ok() ? *as_run : solver_step;
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

std::string LostReason(const LostDevices& lost) {
  const char* what = lost.left.size() == lost.workers.size() ? " left"
                     : lost.left.empty()                     ? " lost"
                                                             : " lost or left";
  return absl::StrCat(lost.workers.size() == 1 ? "worker " : "workers ",
                      absl::StrJoin(lost.workers, ", "), what, " (device",
                      lost.lost.size() == 1 ? " " : "s ", absl::StrJoin(lost.lost, ", "), ")");
}

std::string JoinedReason(const std::set<std::string>& joined) {
  return absl::StrCat(joined.size() == 1 ? "device " : "devices ", absl::StrJoin(joined, ", "),
                      joined.size() == 1 ? " has" : " have", " a live worker again");
}

// The device furthest from the median, named against the model when the
// median matches it and against the median device otherwise.
std::string CalibrationReason(const CalibrationResult& est) {
  const DeviceFactor* worst = nullptr;
  double worst_dev = -1;
  for (const DeviceFactor& f : est.devices) {
    const double dev = std::abs(std::log(f.time_factor / est.median_factor));
    if (dev > worst_dev) {
      worst_dev = dev;
      worst = &f;
    }
  }
  const double median = est.median_factor;
  if (worst == nullptr) return "calibration";
  if (std::abs(std::log(median)) < std::log(1.05)) {
    return absl::StrCat("calibration: device ", worst->device_id, " is ", Ratio(worst->time_factor),
                        " than modelled");
  }
  if (worst_dev < std::log(1.05)) {
    return absl::StrFormat("calibration: devices run %.2fx the modelled time", median);
  }
  return absl::StrFormat(
      "calibration: device %s is %s than the median device (which runs "
      "%.2fx the modelled time)",
      worst->device_id, Ratio(worst->time_factor / median), median);
}

// `next` with the calibration it was planned under (Plan.calibration).
v1::Plan WithCalibration(v1::Plan next, const Cluster& cluster, const DeviceFactors& factors,
                         const LinkCalibration& links, const LostDevices& lost,
                         const ReplanOutcome& outcome) {
  v1::PlanCalibration* cal = next.mutable_calibration();
  for (const FittedLink& l : links.links) *cal->add_links() = LinkFitToProto(l);
  for (int d = 0; d < cluster.num_devices(); ++d) {
    const std::string& id = cluster.device(d).id;
    v1::DeviceFactor* f = cal->add_devices();
    f->set_device_id(id);
    auto it = factors.by_device.find(id);
    f->set_time_factor(it == factors.by_device.end() ? factors.default_factor : it->second);
    auto samples = factors.samples.find(id);
    f->set_samples(samples == factors.samples.end() ? 0 : samples->second);
  }
  for (const std::string& d : lost.devices) cal->add_excluded_devices(d);
  const double cur = outcome.current_step_seconds;
  cal->set_previous_step_seconds(std::isinf(cur) ? 0 : cur);
  cal->set_step_seconds(outcome.new_step_seconds);
  return next;
}

// Why an evaluation has nothing to do: the lost or joined worker it was
// for is gone, or every worker is away (e.g. the planner was down longer
// than a lease: keep the plan, they reconnect to it). nullopt: go on.
std::optional<std::string> NothingToReplan(ReplanTrigger trigger, const v1::Job& job,
                                           const v1::VersionedPlan& vp, const LostDevices& lost,
                                           const std::set<std::string>& joined) {
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

// What the reports of the current version say: device factors, links and
// the host time per message, fitted on the steps after the warm-up.
struct Fitted {
  Estimate estimate;
  LinkCalibration links;
  HostOverhead host;
};

absl::StatusOr<Fitted> Fit(JobRegistry& registry, const v1::Job& job, const v1::VersionedPlan& vp,
                           const DecodedPlan& current, const LostDevices& lost,
                           ReplanTrigger trigger, const ReplanPolicyOptions& options) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StepSample> samples,
                            ReportSamples(registry, job, vp.version(), options.report_window));
  Fitted fit;
  PIPEPLAN_ASSIGN_OR_RETURN(
      fit.estimate,
      EstimateFactors(samples, current, lost, trigger == ReplanTrigger::kCalibration, options));
  const std::vector<StepSample> settled = AfterWarmup(samples, options.warmup_steps);
  fit.links =
      CalibrateLinks(settled, ClusterSpecFromProto(vp.request().cluster()), PlanLinks(vp.plan()));
  fit.host = FitHostOverhead(settled);
  return fit;
}

// The published version's reason: why, then the predicted step before and after.
std::string VersionReason(ReplanTrigger trigger, const CalibrationResult& est,
                          const std::set<std::string>& joined, const LostDevices& lost,
                          const ReplanOutcome& outcome) {
  const std::string why = trigger == ReplanTrigger::kCalibration    ? CalibrationReason(est)
                          : trigger == ReplanTrigger::kWorkerJoined ? JoinedReason(joined)
                                                                    : LostReason(lost);
  return absl::StrCat(why, absl::StrFormat("; predicted step %.4g s -> %.4g s",
                                           outcome.current_step_seconds, outcome.new_step_seconds));
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
    if (st.version != job.plan_version()) {
      st.version = job.plan_version();
      st.baseline_step.clear();
      st.lost_tried.clear();
      st.joined_tried.clear();
      for (const v1::WorkerStatus& w : job.workers()) {
        st.baseline_step[w.info().worker_id()] = w.last_step();
      }
    }
    if (st.in_flight) continue;
    const std::set<std::string> lost_devices = LostRankDevices(job);
    std::optional<ReplanTrigger> trigger;
    const bool lost_new = std::any_of(lost_devices.begin(), lost_devices.end(), [&](auto& d) {
      return std::find(st.lost_tried.begin(), st.lost_tried.end(), d) == st.lost_tried.end();
    });
    const std::set<std::string> joined = JoinedDevices(job);
    const bool joined_new = std::any_of(joined.begin(), joined.end(), [&](auto& d) {
      return std::find(st.joined_tried.begin(), st.joined_tried.end(), d) == st.joined_tried.end();
    });
    if (lost_new) {
      trigger = ReplanTrigger::kWorkerLost;
    } else if (lost_devices.empty() && joined_new) {
      trigger = ReplanTrigger::kWorkerJoined;
    } else if (options_.calibrate && lost_devices.empty() &&
               now - st.last_evaluation >= options_.min_interval &&
               CalibrationDue(job, st, options_)) {
      trigger = ReplanTrigger::kCalibration;
    }
    if (!trigger) continue;
    const std::string id = job.id();
    const ReplanTrigger t = *trigger;
    absl::Status admitted = pool_->Submit([this, id, t] {
      absl::StatusOr<ReplanOutcome> outcome = Evaluate(id, t);
      if (!outcome.ok() && outcome.status().code() != absl::StatusCode::kNotFound) {
        LogWarn("replan_error", {{"job", id}, {"error", std::string(outcome.status().message())}});
      }
      absl::MutexLock lock(&mu_);
      if (auto it = jobs_.find(id); it != jobs_.end()) it->second.in_flight = false;
    });
    if (!admitted.ok()) continue;  // pool full or stopping: try again next tick
    st.in_flight = true;
    if (t == ReplanTrigger::kWorkerLost) {
      st.lost_tried.assign(lost_devices.begin(), lost_devices.end());
    } else if (t == ReplanTrigger::kWorkerJoined) {
      st.joined_tried.assign(joined.begin(), joined.end());
    } else {
      st.last_evaluation = now;
    }
    ++submitted;
  }
  return submitted;
}

absl::StatusOr<ReplanOutcome> ReplanPolicy::Evaluate(const std::string& job_id,
                                                     ReplanTrigger trigger) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, registry_->GetPlan(job_id, 0));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, registry_->GetJob(job_id));
  const std::string version = absl::StrCat(vp.version());
  const bool calibrating = trigger == ReplanTrigger::kCalibration;
  ReplanOutcome outcome;
  std::string factors_text;  // "gpu0:1.000,gpu1:2.010" once estimated
  auto no_change = [&](std::string why) {
    outcome.reason = std::move(why);
    LogInfo("replan_skipped", {{"job", job_id},
                               {"plan_version", version},
                               {"reason", outcome.reason},
                               {"factors", factors_text}});
    return outcome;
  };

  const LostDevices lost = FindLostDevices(job, vp.request().cluster());
  const std::set<std::string> joined = JoinedDevices(job);
  if (std::optional<std::string> why = NothingToReplan(trigger, job, vp, lost, joined)) {
    return no_change(*std::move(why));
  }
  // The current plan, read as every other reader reads it. One that does not
  // decode cannot be calibrated, but a lost worker is still replanned.
  absl::StatusOr<DecodedPlan> read = DecodePlan(vp.plan());
  if (!read.ok() && calibrating) {
    return no_change(absl::StrCat("cannot read the current plan: ", read.status().message()));
  }
  const bool readable = read.ok();
  const DecodedPlan current = readable ? *std::move(read) : DecodedPlan{};

  // Step 1: device factors and links from the reports of the current version.
  PIPEPLAN_ASSIGN_OR_RETURN(
      std::vector<v1::ReportStepRequest> reports,
      registry_->RecentStepReports(job_id, options_.report_window, kMaxSampleBytes));
  PIPEPLAN_ASSIGN_OR_RETURN(Fitted fit, Fit(*registry_, job, vp, current, lost, trigger, options_));
  const Estimate& est = fit.estimate;
  factors_text = FactorsText(est.result);
  ShowFactors(metrics_, job_id, est.result);
  if (!est.skip.empty()) return no_change(est.skip);
  const DeviceFactors factors = MergeFactors(current.time_factors, est.result);

  // Step 2: a new plan under the calibrated model, without lost devices. Not
  // finding one (the memory budget, the solver) is the outcome, not an error.
  auto no_plan = [&](const absl::Status& why) {
    LogReplanFailed(job_id, version, trigger, why);
    outcome.reason = absl::StrCat("no plan: ", why.message());
    return outcome;
  };
  absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> memory = ReserveMemory(vp.request());
  if (!memory.ok()) return no_plan(memory.status());
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in,
                            CalibratedInputs(vp.request(), factors, fit.links, lost, options_));
  absl::StatusOr<PlanResult> result = MakePlan(*in.graph, *in.cluster, in.options);
  if (!result.ok()) return no_plan(result.status());
  v1::Plan next = PlanToProto(*in.graph, *in.cluster, *result);
  outcome.new_step_seconds = AsRunStep(next, result->step_seconds, in, fit.host);

  // Step 3: the current plan under the same model; publish when it pays.
  absl::StatusOr<double> cur = ScoreUnder(current, readable, in, fit.host);
  if (!cur.ok() && calibrating) {
    return no_change(absl::StrCat("cannot score the current plan: ", cur.status().message()));
  }
  outcome.current_step_seconds = cur.ok() ? *cur : kInf;
  // A lost worker's replan always pays; the others need both gains.
  const bool floor_applies = calibrating || trigger == ReplanTrigger::kWorkerJoined;
  if (std::optional<std::string> why =
          GainTooSmall(outcome, options_, floor_applies, reports, job, vp.version())) {
    return no_change(*std::move(why));
  }
  const std::string reason = VersionReason(trigger, est.result, joined, lost, outcome);
  next = WithCalibration(std::move(next), *in.cluster, factors, fit.links, lost, outcome);
  absl::StatusOr<ReplanOutcome> published = Publish(job_id, vp, next, reason, trigger, outcome);
  if (!published.ok() && published.status().code() == absl::StatusCode::kAborted) {
    return no_change(std::string(published.status().message()));
  }
  return published;
}

absl::StatusOr<ReplanOutcome> ReplanPolicy::Publish(const std::string& job_id,
                                                    const v1::VersionedPlan& current,
                                                    const v1::Plan& next, const std::string& reason,
                                                    ReplanTrigger trigger, ReplanOutcome outcome) {
  PIPEPLAN_ASSIGN_OR_RETURN(outcome.version,
                            registry_->PublishPlan(job_id, current.request(), next, reason,
                                                   current.version(), PublishAs::kOwner));
  if (metrics_) metrics_->CountReplan(TriggerName(trigger));
  outcome.published = true;
  outcome.reason = reason;
  return outcome;
}

}  // namespace pipeplan::server
