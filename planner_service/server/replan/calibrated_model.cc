#include "calibrated_model.h"

#include <algorithm>
#include <set>
#include <utility>

#include "disturbed_steps.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/convert/report_convert.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/schedule/action.h"
#include "pipeplan/server/replan/version_prediction.h"

namespace pipeplan::server {

absl::StatusOr<std::vector<StepSample>> ReportSamples(const JobRegistry& registry,
                                                      const v1::Job& job, int64_t version,
                                                      int window) {
  // Each worker's current run only: a restarted worker's earlier timings
  // describe a process that is gone (e.g. a straggler since fixed).
  std::map<std::string, std::string> device_of;
  std::map<std::string, std::string> run_of;
  for (const v1::WorkerStatus& w : job.workers()) {
    device_of[w.info().worker_id()] = w.info().device_id();
    run_of[w.info().worker_id()] = w.info().run_id();
  }
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<v1::ReportStepRequest> reports,
                            registry.RecentStepReports(job.id(), window, kMaxSampleBytes));
  std::vector<StepSample> samples;
  for (const v1::ReportStepRequest& r : reports) {
    if (r.plan_version() != version) continue;
    const std::string& run = run_of[r.worker_id()];
    if (!run.empty() && r.run_id() != run) continue;
    samples.push_back(StepSampleFromProto(r, device_of[r.worker_id()]));
  }
  return samples;
}

std::vector<StepSample> AfterWarmup(std::vector<StepSample> samples, int warmup_steps) {
  std::map<std::string, int64_t> first = FirstCountedSteps(samples, warmup_steps);
  std::erase_if(samples, [&](const StepSample& s) { return s.step < first[s.worker_id]; });
  return samples;
}

LinkCalibration CalibrateLinks(const std::vector<StepSample>& samples, const ClusterSpec& nominal,
                               const LinkCalibration& prior, const LinkFitOptions& options) {
  const std::vector<TransferSample> transfers = PairTransfers(samples, options.max_seconds);
  LinkCalibration fresh = FitLinks(transfers, nominal, options);
  LinkCalibration out = fresh;
  for (const FittedLink& p : prior.links) {
    const bool replaced = std::any_of(fresh.links.begin(), fresh.links.end(), [&](auto& f) {
      return f.scope == p.scope && f.src_device == p.src_device && f.dst_device == p.dst_device;
    });
    if (!replaced) out.links.push_back(p);
  }
  return out;
}

LinkCalibration PlanLinks(const v1::Plan& plan) {
  LinkCalibration out;
  for (const v1::LinkFit& l : plan.calibration().links()) {
    absl::StatusOr<FittedLink> fit = LinkFitFromProto(l);
    if (fit.ok()) out.links.push_back(*std::move(fit));
  }
  return out;
}

namespace {

// Writes the calibrated links into the request's cluster.
absl::Status ApplyLinks(const ClusterSpec& calibrated, const LinkCalibration& links,
                        v1::ClusterTopology* c) {
  if (links.links.empty()) return absl::OkStatus();
  PIPEPLAN_ASSIGN_OR_RETURN(ClusterSpec linked, ApplyLinkCalibration(calibrated, links));
  std::set<std::string> devices;
  for (const DeviceSpec& d : linked.devices) devices.insert(d.id);
  c->clear_links();
  for (const LinkSpec& l : linked.links) {
    if (!devices.contains(l.src) || !devices.contains(l.dst)) continue;
    v1::Link* out = c->add_links();
    out->set_src(l.src);
    out->set_dst(l.dst);
    out->set_bandwidth_bytes_per_second(l.bandwidth);
    out->set_latency_seconds(l.latency);
  }
  c->set_intra_host_bandwidth(linked.intra_host_bandwidth);
  c->set_inter_host_bandwidth(linked.inter_host_bandwidth);
  c->set_intra_host_latency(linked.intra_host_latency);
  c->set_inter_host_latency(linked.inter_host_latency);
  return absl::OkStatus();
}

// Per rank, the median exposed all-reduce its workers reported (over every
// replica); -1 where none did.
std::vector<double> MeasuredExposed(const std::vector<StepSample>& samples, int num_ranks) {
  std::vector<std::vector<double>> seen(std::max(0, num_ranks));
  for (const StepSample& s : samples) {
    if (s.allreduce_exposed_seconds < 0 || s.rank < 0 || s.rank >= num_ranks) continue;
    seen[s.rank].push_back(s.allreduce_exposed_seconds);
  }
  std::vector<double> out;
  for (std::vector<double>& v : seen) out.push_back(MedianOr(std::move(v), -1));
  return out;
}

// The per-action ratios miss what moves whole steps: the machine's load and
// a worker's CPU share slow every rank of a step at once (measured on 2-core
// CPU workers: steps +-10% with each device's actions +-2%). So the spread
// also draws whole steps, from the version's own makespans over their
// median, shrunk by s in [0, 1] so that the version's plan, sampled under
// the whole spread, spreads its steps as much as they measured ((p90 - p50)
// / p50): the per-action draws already carry part of it. Two rounds of
// s <- s x measured / sampled from s = 1.
constexpr size_t kMinSpreadSteps = 8;

void FitSpreadToSteps(const PlanInputs& in, const FixedPlan& fixed, int num_ranks,
                      CalibratedModel& model) {
  const std::vector<double> steps = StepMakespans(model.samples, num_ranks);
  if (steps.size() < kMinSpreadSteps) return;
  const double p50 = QuantileOr(steps, 0.5, 0);
  if (!(p50 > 0)) return;
  const double measured = (QuantileOr(steps, 0.9, p50) - p50) / p50;
  AsRunOptions as_run{.stage_fit = &model.stage_fit, .cpu_pools = &model.cpu_pools};
  as_run.host_overhead = model.host;
  auto with_steps = [&](double s) {
    ActionSpread spread = model.spread;
    for (double x : steps) spread.step_ratios.push_back(std::max(0.05, 1 + s * (x / p50 - 1)));
    return spread;
  };
  double s = 1;
  for (int round = 0; round < 2 && measured > 0; ++round) {
    absl::StatusOr<StepQuantiles> q =
        SimulateSpread(*in.graph, *in.cluster, fixed, as_run, with_steps(s));
    if (!q.ok() || !(q->p50_seconds > 0)) return;
    const double sampled = (q->p90_seconds - q->p50_seconds) / q->p50_seconds;
    if (!(sampled > 0)) break;
    s = std::clamp(s * measured / sampled, 0.0, 1.0);
  }
  model.spread = with_steps(s);
}

// The fits that price the version's own plan node by node on the
// calibrated cluster: the stage times per operator kind (a split elsewhere
// is priced from them), each rank's update by its parameter bytes, the
// replicas' all-reduce ring scale and the spread's width. Left as
// they are when the version cannot be priced (a device gone, an unreadable
// plan, no node split).
void FitOnGraph(const v1::VersionedPlan& version, const DecodedPlan& plan, CalibratedModel& model) {
  if (plan.node_stage.empty() || plan.num_stages() == 0) return;
  absl::StatusOr<v1::PlanRequest> request = CalibratedRequest(version.request(), model, {});
  if (!request.ok()) return;
  absl::StatusOr<PlanInputs> in = PlanInputs::FromRequest(*request);
  if (!in.ok()) return;
  absl::StatusOr<FixedPlan> fixed = FixedPlanOf(plan, *in->cluster, in->options);
  if (!fixed.ok()) return;
  const CostModel cost(*in->graph, *in->cluster, AsRunCostOptions(*in->graph, *fixed));
  FitStageKinds(model.samples, cost, fixed->node_stage, fixed->stage_device, model.stage_fit);
  absl::StatusOr<std::vector<StageCost>> stages =
      cost.Evaluate(fixed->node_stage, fixed->stage_device);
  if (stages.ok()) {
    std::vector<double> bytes;
    for (const StageCost& st : *stages) bytes.push_back(st.param_bytes);
    model.stage_fit.update = FitUpdates(model.samples, bytes);
  }
  const AsRunOptions as_run{
      .host_overhead = model.host, .stage_fit = &model.stage_fit, .cpu_pools = &model.cpu_pools};
  // The workers' probe prices the ring's links (a plan without replicas
  // runs none) ...
  absl::StatusOr<std::optional<double>> bandwidth =
      FitRingBandwidthFromProbes(*in->graph, *in->cluster, *fixed, as_run, model.samples);
  if (bandwidth.ok() && bandwidth->has_value()) {
    model.stage_fit.allreduce_ring_bandwidth = **bandwidth;
  }
  // ... and a measured exposed all-reduce scales the ring it ran.
  const std::vector<double> exposed = MeasuredExposed(model.samples, plan.num_ranks);
  if (std::any_of(exposed.begin(), exposed.end(), [](double x) { return x > 0; })) {
    absl::StatusOr<double> scale =
        FitAllReduceScale(*in->graph, *in->cluster, *fixed, as_run, exposed);
    if (scale.ok()) model.stage_fit.allreduce_ring_scale = *scale;
  }
  // Last: the spread is fitted on the plan as everything above prices it.
  FitSpreadToSteps(*in, *fixed, plan.num_ranks, model);
}

}  // namespace

absl::StatusOr<v1::PlanRequest> CalibratedRequest(const v1::PlanRequest& nominal,
                                                  const std::map<std::string, double>& factors,
                                                  double default_factor,
                                                  const std::vector<std::string>& excluded,
                                                  const LinkCalibration& links) {
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
  PIPEPLAN_RETURN_IF_ERROR(ApplyLinks(calibrated, links, c));
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

DeviceFactors MergeFactors(const std::map<std::string, double>& prior,
                           const CalibrationResult& estimate) {
  DeviceFactors out{.by_device = prior};
  for (const DeviceFactor& f : estimate.devices) {
    out.by_device[f.device_id] = f.time_factor;
    out.samples[f.device_id] = f.samples;
  }
  if (!estimate.devices.empty()) {
    out.default_factor = estimate.median_factor;
  } else if (!prior.empty()) {
    std::vector<double> v;
    for (const auto& [d, f] : prior) v.push_back(f);
    out.default_factor = MedianOr(std::move(v), 1);
  }
  return out;
}

absl::StatusOr<CalibratedModel> BuildCalibratedModel(const JobRegistry& registry,
                                                     const v1::Job& job,
                                                     const v1::VersionedPlan& version,
                                                     const DecodedPlan& plan,
                                                     const CalibratedModelOptions& options) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StepSample> samples,
                            ReportSamples(registry, job, version.version(), options.report_window));
  CalibratedModel model;
  model.samples = WithoutDisturbedSteps(AfterWarmup(std::move(samples), options.warmup_steps));
  // Computes of CPU workers that share a machine's cores are fitted at
  // their seconds alone; the simulator adds each plan's own sharing back.
  model.cpu_pools = CpuPoolsOf(model.samples);
  model.samples = SoloComputeTimes(std::move(model.samples), model.cpu_pools);
  // The warm-up is already dropped from the samples.
  model.estimate = EstimateDeviceFactors(
      model.samples, plan.PlannedStages(),
      {.warmup_steps = 0, .min_samples = std::max(1, options.min_device_samples)});
  model.factors =
      MergeFactors(plan.time_factors, model.estimate.ok() ? *model.estimate : CalibrationResult{});
  model.links = CalibrateLinks(model.samples, ClusterSpecFromProto(version.request().cluster()),
                               PlanLinks(version.plan()), options.links);
  model.host = FitHostOverhead(model.samples, options.host);
  absl::StatusOr<ActionSpread> spread = MeasureActionSpread(model.samples, 0);
  if (spread.ok()) model.spread = *std::move(spread);
  model.stage_fit = FitStageTimes(model.samples, plan.PlannedStages());
  model.stage_fit.weight_pass_repeats_backward =
      std::any_of(model.samples.begin(), model.samples.end(),
                  [](const StepSample& s) { return s.weight_pass_repeats_backward; });
  model.stage_fit.cluster_factor = model.factors.by_device;
  model.stage_fit.cluster_default_factor = model.factors.default_factor;
  FitOnGraph(version, plan, model);
  return model;
}

absl::StatusOr<v1::PlanRequest> CalibratedRequest(const v1::PlanRequest& nominal,
                                                  const CalibratedModel& model,
                                                  const std::vector<std::string>& excluded) {
  return CalibratedRequest(nominal, model.factors.by_device, model.factors.default_factor, excluded,
                           model.links);
}

std::vector<double> ShippedBytes(const std::vector<StepSample>& samples, int num_stages) {
  std::vector<std::vector<double>> seen(std::max(0, num_stages - 1));
  for (const StepSample& s : samples) {
    for (const TimingSample& t : s.timings) {
      if (t.bytes <= 0) continue;
      absl::StatusOr<std::optional<schedule::Action>> a = schedule::ParseAction(t.action);
      if (!a.ok() || !*a || (*a)->type != schedule::ActionType::kSendF) continue;
      const int b = (*a)->stage;
      if (b >= 0 && b < static_cast<int>(seen.size())) seen[b].push_back(t.bytes);
    }
  }
  std::vector<double> out(seen.size(), 0.0);
  for (size_t b = 0; b < seen.size(); ++b) {
    if (seen[b].empty()) continue;
    std::nth_element(seen[b].begin(), seen[b].begin() + seen[b].size() / 2, seen[b].end());
    out[b] = seen[b][seen[b].size() / 2];
  }
  return out;
}

}  // namespace pipeplan::server
