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
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/core/status_macros.h"
#include "pipeplan/server/log.h"
#include "pipeplan/server/metrics.h"

namespace pipeplan::server {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Ratio(double rel) {
  return rel >= 1 ? absl::StrFormat("%.1fx slower", rel) : absl::StrFormat("%.1fx faster", 1 / rel);
}

// The job's request with the calibrated cluster: flops divided by the
// factors, `excluded` devices (and their links) removed, measured node
// seconds rescaled to the new fastest device. The options stay as requested
// (Evaluate caps the ranks at the devices left).
absl::StatusOr<v1::PlanRequest> CalibratedRequest(const v1::PlanRequest& nominal,
                                                  const std::map<std::string, double>& factors,
                                                  double default_factor,
                                                  const std::vector<std::string>& excluded) {
  const ClusterSpec spec = ClusterSpecFromProto(nominal.cluster());
  PIPEPLAN_ASSIGN_OR_RETURN(ClusterSpec calibrated,
                            CalibratedClusterSpec(spec, factors, default_factor, excluded));
  std::map<std::string, double> flops;
  double nominal_max = 0, calibrated_max = 0;
  for (const DeviceSpec& d : spec.devices) nominal_max = std::max(nominal_max, d.flops);
  for (const DeviceSpec& d : calibrated.devices) {
    flops[d.id] = d.flops;
    calibrated_max = std::max(calibrated_max, d.flops);
  }
  const std::set<std::string> gone(excluded.begin(), excluded.end());
  v1::PlanRequest out = nominal;
  v1::ClusterTopology* c = out.mutable_cluster();
  c->clear_devices();
  for (const v1::Device& d : nominal.cluster().devices()) {
    auto it = flops.find(d.id());
    if (it == flops.end()) continue;
    v1::Device* nd = c->add_devices();
    *nd = d;
    nd->set_flops(it->second);
  }
  c->clear_links();
  for (const v1::Link& l : nominal.cluster().links()) {
    if (!gone.contains(l.src()) && !gone.contains(l.dst())) *c->add_links() = l;
  }
  // Measured node times refer to the fastest device (cost_model.h); keep
  // them meaning the same seconds when the fastest device changes.
  if (nominal_max > 0 && calibrated_max > 0 && nominal_max != calibrated_max) {
    const double scale = nominal_max / calibrated_max;
    for (v1::Node& n : *out.mutable_graph()->mutable_nodes()) {
      if (n.has_forward_seconds()) n.set_forward_seconds(n.forward_seconds() * scale);
      if (n.has_backward_seconds()) n.set_backward_seconds(n.backward_seconds() * scale);
    }
  }
  return out;
}

}  // namespace

ReplanPolicy::ReplanPolicy(JobRegistry* registry, SolvePool* pool, const Clock* clock,
                           ReplanPolicyOptions options, Metrics* metrics)
    : registry_(registry), pool_(pool), clock_(clock), options_(options), metrics_(metrics) {}

int ReplanPolicy::Tick() {
  if (!options_.enabled) return 0;
  const std::vector<v1::Job> jobs = registry_->ListJobs();
  const absl::Time now = clock_->Now();
  absl::MutexLock l(&mu_);
  // Forget deleted jobs (and their calibration gauges).
  {
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
  int submitted = 0;
  for (const v1::Job& job : jobs) {
    JobState& st = jobs_[job.id()];
    if (st.version != job.plan_version()) {
      st.version = job.plan_version();
      st.baseline_step.clear();
      st.lost_tried.clear();
      for (const v1::WorkerStatus& w : job.workers()) {
        st.baseline_step[w.info().worker_id()] = w.last_step();
      }
    }
    if (st.in_flight) continue;
    std::set<std::string> active_devices, lost_devices;
    for (const v1::WorkerStatus& w : job.workers()) {
      if (w.state() != v1::WORKER_LOST) active_devices.insert(w.info().device_id());
    }
    for (const v1::WorkerStatus& w : job.workers()) {
      if (w.state() == v1::WORKER_LOST && w.rank() >= 0 &&
          !active_devices.contains(w.info().device_id())) {
        lost_devices.insert(w.info().device_id());
      }
    }
    std::optional<ReplanTrigger> trigger;
    const bool lost_new = std::any_of(lost_devices.begin(), lost_devices.end(), [&](auto& d) {
      return std::find(st.lost_tried.begin(), st.lost_tried.end(), d) == st.lost_tried.end();
    });
    if (lost_new) {
      trigger = ReplanTrigger::kWorkerLost;
    } else if (lost_devices.empty() && now - st.last_evaluation >= options_.min_interval) {
      bool due = false, short_of_steps = false;
      for (const v1::WorkerStatus& w : job.workers()) {
        if (w.rank() < 0 || w.state() == v1::WORKER_LOST) continue;
        auto [it, inserted] = st.baseline_step.emplace(w.info().worker_id(), w.last_step());
        due = true;
        if (w.last_step() - it->second < options_.min_steps + options_.warmup_steps) {
          short_of_steps = true;
        }
      }
      if (due && !short_of_steps) trigger = ReplanTrigger::kCalibration;
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
  ReplanOutcome outcome;
  std::string factors_text;  // "gpu0:1.00,gpu1:2.01" once estimated
  auto no_change = [&](std::string why) {
    outcome.reason = std::move(why);
    LogInfo("replan_skipped", {{"job", job_id},
                               {"plan_version", version},
                               {"reason", outcome.reason},
                               {"factors", factors_text}});
    return outcome;
  };

  // Devices whose every worker is lost.
  std::set<std::string> active_devices;
  std::map<std::string, std::vector<std::string>> lost_by_device;
  for (const v1::WorkerStatus& w : job.workers()) {
    if (w.state() != v1::WORKER_LOST) active_devices.insert(w.info().device_id());
  }
  for (const v1::WorkerStatus& w : job.workers()) {
    if (w.state() == v1::WORKER_LOST && !active_devices.contains(w.info().device_id())) {
      lost_by_device[w.info().device_id()].push_back(w.info().worker_id());
    }
  }
  std::vector<std::string> excluded, lost_workers;
  for (const auto& [device, workers] : lost_by_device) {
    excluded.push_back(device);
    lost_workers.insert(lost_workers.end(), workers.begin(), workers.end());
  }
  if (trigger == ReplanTrigger::kWorkerLost && excluded.empty()) {
    return no_change("no lost worker left");
  }

  // The current plan, read as every other reader reads it. One that does not
  // decode cannot be calibrated, but a lost worker is still replanned.
  absl::StatusOr<DecodedPlan> current = DecodePlan(vp.plan());
  if (!current.ok() && trigger == ReplanTrigger::kCalibration) {
    return no_change(absl::StrCat("cannot read the current plan: ", current.status().message()));
  }
  const bool readable = current.ok();
  const DecodedPlan decoded = readable ? *std::move(current) : DecodedPlan{};
  // Factors from the reports of the current version.
  const std::map<std::string, double>& prior = decoded.time_factors;
  const std::vector<PlannedStage> stages = decoded.PlannedStages();
  const std::set<std::string> plan_devices(decoded.rank_devices.begin(),
                                           decoded.rank_devices.end());
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<v1::ReportStepRequest> reports,
                            registry_->RecentStepReports(job_id, options_.report_window));
  std::vector<StepSample> samples;
  for (const v1::ReportStepRequest& r : reports) {
    if (r.plan_version() != vp.version()) continue;
    StepSample s{.worker_id = r.worker_id(), .step = r.step(), .timings = {}};
    s.timings.reserve(r.timings_size());
    for (const v1::ActionTiming& t : r.timings()) s.timings.push_back({t.action(), t.seconds()});
    samples.push_back(std::move(s));
  }
  CalibrationOptions co{.warmup_steps = options_.warmup_steps,
                        .min_samples = std::max(1, options_.min_steps)};
  absl::StatusOr<CalibrationResult> est = EstimateDeviceFactors(samples, stages, co);
  if (!est.ok()) {
    if (trigger == ReplanTrigger::kCalibration) {
      return no_change(absl::StrCat("reports do not match the plan: ", est.status().message()));
    }
    est = CalibrationResult{};
  }
  for (const DeviceFactor& f : est->devices) {
    if (metrics_) metrics_->SetCalibrationFactor(job_id, f.device_id, f.time_factor);
    absl::StrAppendFormat(&factors_text, "%s%s:%.3f", factors_text.empty() ? "" : ",", f.device_id,
                          f.time_factor);
  }
  if (trigger == ReplanTrigger::kCalibration) {
    for (const std::string& d : plan_devices) {
      if (!est->Find(d) && !lost_by_device.contains(d)) {
        return no_change(absl::StrCat("not enough reports for device ", d));
      }
    }
  }
  std::map<std::string, double> factors = prior;
  std::map<std::string, int> samples_of;
  for (const DeviceFactor& f : est->devices) {
    factors[f.device_id] = f.time_factor;
    samples_of[f.device_id] = f.samples;
  }
  double default_factor = 1;
  if (!est->devices.empty()) {
    default_factor = est->median_factor;
  } else if (!prior.empty()) {
    std::vector<double> v;
    for (const auto& [d, f] : prior) v.push_back(f);
    default_factor = MedianOf(std::move(v));
  }

  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest calibrated,
                            CalibratedRequest(vp.request(), factors, default_factor, excluded));
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, PlanInputs::FromRequest(calibrated, options_.limits));
  in.options.num_ranks = std::min(in.options.num_ranks, in.cluster->num_devices());
  const double limit = in.options.time_limit_seconds > 0 ? in.options.time_limit_seconds : 10.0;
  in.options.time_limit_seconds = std::max(0.01, std::min(limit, options_.max_solve_seconds));
  absl::StatusOr<PlanResult> result = MakePlan(*in.graph, *in.cluster, in.options);
  if (!result.ok()) {
    LogWarn("replan_failed",
            {{"job", job_id},
             {"plan_version", version},
             {"trigger", trigger == ReplanTrigger::kWorkerLost ? "worker_lost" : "calibration"},
             {"error", std::string(result.status().message())}});
    outcome.reason = absl::StrCat("no plan: ", result.status().message());
    return outcome;
  }
  outcome.new_step_seconds = result->step_seconds;

  // The current plan under the same model (infeasible when it uses a device
  // that is gone).
  outcome.current_step_seconds = kInf;
  if (absl::StatusOr<FixedPlan> fixed =
          readable ? FixedPlanOf(decoded, *in.cluster, in.options) : current.status();
      fixed.ok()) {
    absl::StatusOr<FixedPlanScore> score = SimulateFixedPlan(*in.graph, *in.cluster, *fixed);
    if (score.ok()) {
      outcome.current_step_seconds = score->step_seconds;
    } else if (trigger == ReplanTrigger::kCalibration) {
      return no_change(absl::StrCat("cannot score the current plan: ", score.status().message()));
    }
  }
  const double cur = outcome.current_step_seconds;
  const double gain = std::isinf(cur) ? 1.0 : (cur - outcome.new_step_seconds) / cur;
  if (!(gain > options_.min_gain)) {
    return no_change(absl::StrFormat("predicted gain %.1f%% (%.4g s -> %.4g s) is not above %.1f%%",
                                     gain * 100, cur, outcome.new_step_seconds,
                                     options_.min_gain * 100));
  }

  std::string reason;
  if (trigger == ReplanTrigger::kWorkerLost) {
    reason = absl::StrCat(lost_workers.size() == 1 ? "worker " : "workers ",
                          absl::StrJoin(lost_workers, ", "), " lost (device",
                          excluded.size() == 1 ? " " : "s ", absl::StrJoin(excluded, ", "), ")");
  } else {
    // The device furthest from the median, named against the model when the
    // median matches it and against the median device otherwise.
    const DeviceFactor* worst = nullptr;
    double worst_dev = -1;
    for (const DeviceFactor& f : est->devices) {
      const double dev = std::abs(std::log(f.time_factor / est->median_factor));
      if (dev > worst_dev) {
        worst_dev = dev;
        worst = &f;
      }
    }
    const double median = est->median_factor;
    if (worst == nullptr) {
      reason = "calibration";
    } else if (std::abs(std::log(median)) < std::log(1.05)) {
      reason = absl::StrCat("calibration: device ", worst->device_id, " is ",
                            Ratio(worst->time_factor), " than modelled");
    } else if (worst_dev < std::log(1.05)) {
      reason = absl::StrFormat("calibration: devices run %.2fx the modelled time", median);
    } else {
      reason = absl::StrFormat(
          "calibration: device %s is %s than the median device (which runs "
          "%.2fx the modelled time)",
          worst->device_id, Ratio(worst->time_factor / median), median);
    }
  }
  absl::StrAppendFormat(&reason, "; predicted step %.4g s -> %.4g s", cur,
                        outcome.new_step_seconds);

  v1::Plan next = PlanToProto(*in.graph, *in.cluster, *result);
  v1::PlanCalibration* cal = next.mutable_calibration();
  for (int d = 0; d < in.cluster->num_devices(); ++d) {
    const std::string& id = in.cluster->device(d).id;
    v1::DeviceFactor* f = cal->add_devices();
    f->set_device_id(id);
    auto it = factors.find(id);
    f->set_time_factor(it == factors.end() ? default_factor : it->second);
    f->set_samples(samples_of.contains(id) ? samples_of[id] : 0);
  }
  for (const std::string& d : excluded) cal->add_excluded_devices(d);
  cal->set_previous_step_seconds(std::isinf(cur) ? 0 : cur);
  cal->set_step_seconds(outcome.new_step_seconds);

  absl::StatusOr<int64_t> published =
      registry_->PublishPlan(job_id, vp.request(), next, reason, vp.version());
  if (!published.ok()) {
    if (published.status().code() == absl::StatusCode::kAborted) {
      return no_change(std::string(published.status().message()));
    }
    return published.status();
  }
  if (metrics_) {
    metrics_->CountReplan(trigger == ReplanTrigger::kWorkerLost ? "worker_lost" : "calibration");
  }
  outcome.published = true;
  outcome.version = *published;
  outcome.reason = reason;
  return outcome;
}

}  // namespace pipeplan::server
