#include "pipeplan/core/step_spread.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/schedule/action.h"
#include "pipeplan/core/schedule/shared_compute.h"
#include "pipeplan/core/schedule/simulator.h"

namespace pipeplan {
namespace {

// The spread kind of a compute action; -1 for anything else.
int KindOf(schedule::ActionType type) {
  switch (type) {
    case schedule::ActionType::kForward:
      return static_cast<int>(SpreadKind::kForward);
    case schedule::ActionType::kFullBackward:
      return static_cast<int>(SpreadKind::kBackward);
    case schedule::ActionType::kBackwardInput:
      return static_cast<int>(SpreadKind::kBackwardInput);
    case schedule::ActionType::kBackwardWeight:
      return static_cast<int>(SpreadKind::kBackwardWeight);
    default:
      return -1;
  }
}

// Per device and kind, each counted step's mean action seconds, in step
// order.
using StepMeans = std::map<std::string, std::vector<std::vector<double>>>;

absl::StatusOr<StepMeans> MeansPerStep(std::span<const StepSample> samples, int warmup_steps) {
  std::map<std::string, int64_t> first = FirstCountedSteps(samples, warmup_steps);
  std::vector<const StepSample*> ordered;
  for (const StepSample& r : samples) {
    if (r.step >= first[r.worker_id]) ordered.push_back(&r);
  }
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const StepSample* a, const StepSample* b) { return a->step < b->step; });
  StepMeans out;
  for (const StepSample* r : ordered) {
    double sum[kNumSpreadKinds] = {}, count[kNumSpreadKinds] = {};
    for (const TimingSample& t : r->timings) {
      PIPEPLAN_ASSIGN_OR_RETURN(std::optional<schedule::Action> a, schedule::ParseAction(t.action));
      const int kind = a ? KindOf(a->type) : -1;
      if (kind < 0) continue;
      sum[kind] += t.seconds;
      count[kind] += 1;
    }
    const std::string& device = r->device_id.empty() ? r->worker_id : r->device_id;
    auto [it, added] = out.try_emplace(device, kNumSpreadKinds);
    for (int k = 0; k < kNumSpreadKinds; ++k) {
      if (count[k] > 0) it->second[k].push_back(sum[k] / count[k]);
    }
  }
  return out;
}

// One ratio from `ratios` (1 when empty).
double Draw(const std::vector<double>& ratios, std::mt19937_64& rng) {
  if (ratios.empty()) return 1.0;
  std::uniform_int_distribution<size_t> pick(0, ratios.size() - 1);
  return ratios[pick(rng)];
}

// `base`'s compute scaled by one draw per device and kind.
schedule::StageCosts Scaled(const schedule::StageCosts& base, const std::vector<std::string>& dev,
                            const ActionSpread& spread, std::mt19937_64& rng) {
  std::map<std::string, std::vector<double>> draws;
  for (const std::string& d : dev) {
    if (draws.contains(d)) continue;
    auto it = spread.ratios.find(d);
    std::vector<double>& f = draws[d];
    for (int k = 0; k < kNumSpreadKinds; ++k) {
      const bool own = it != spread.ratios.end() && !it->second[k].empty();
      f.push_back(Draw(own ? it->second[k] : spread.pooled[k], rng));
    }
  }
  schedule::StageCosts c = base;
  for (size_t s = 0; s < dev.size(); ++s) {
    const std::vector<double>& f = draws[dev[s]];
    // A report with I and W apart has their own ratios; one with full B
    // scales both halves by B's.
    const bool split = !spread.pooled[2].empty() || !spread.pooled[3].empty();
    c.forward[s] *= f[0];
    c.backward_input[s] *= split ? f[2] : f[1];
    c.backward_weight[s] *= split ? f[3] : f[1];
  }
  return c;
}

// Replicas simulated beside the first, at most: each sampled step simulates
// every one, and a replan scores several candidates. The expected maximum
// of n draws grows as sqrt(2 ln n): 16 replicas' wait is about 0.76 of 128's.
constexpr size_t kMaxOtherReplicas = 15;

// Each replica's device per stage but the simulated replica's (empty
// without replicas), the first kMaxOtherReplicas, from `rank_devices`
// (AsRunCosts: per rank, its device in every replica, the simulated one's
// first).
std::vector<std::vector<std::string>> OtherReplicas(
    const std::vector<std::vector<std::string>>& rank_devices, const std::vector<int>& stage_rank) {
  std::vector<std::vector<std::string>> out;
  for (size_t s = 0; s < stage_rank.size(); ++s) {
    if (static_cast<size_t>(stage_rank[s]) >= rank_devices.size()) return {};
    const std::vector<std::string>& devices = rank_devices[stage_rank[s]];
    for (size_t k = 1; k < devices.size() && k <= kMaxOtherReplicas; ++k) {
      if (out.size() < k) out.emplace_back(stage_rank.size());
      out[k - 1][s] = devices[k];
    }
  }
  return out;
}

absl::Status CheckSampling(const schedule::StageCosts& costs,
                           const std::vector<std::string>& stage_device,
                           const SpreadOptions& options,
                           const std::vector<std::vector<std::string>>& replicas) {
  if (options.samples < 1) return absl::InvalidArgumentError("spread samples must be at least 1");
  if (stage_device.size() != costs.forward.size() ||
      std::any_of(replicas.begin(), replicas.end(),
                  [&](const auto& r) { return r.size() != stage_device.size(); })) {
    return absl::InvalidArgumentError("spread: one device per stage is needed");
  }
  return absl::OkStatus();
}

}  // namespace

bool ActionSpread::empty() const {
  for (const std::vector<double>& p : pooled) {
    if (!p.empty()) return false;
  }
  return step_ratios.empty();
}

double ActionSpread::NoiseRatio() const {
  std::vector<double> all = pooled[0];
  all.insert(all.end(), pooled[1].begin(), pooled[1].end());
  const double p50 = QuantileOr(all, 0.5, 0);
  return p50 > 0 ? (QuantileOr(all, 0.9, p50) - p50) / p50 : 0;
}

double QuantileOr(std::vector<double> values, double q, double if_empty) {
  if (values.empty()) return if_empty;
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(values.size() - 1, lo + 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] * (1 - frac) + values[hi] * frac;
}

absl::StatusOr<ActionSpread> MeasureActionSpread(std::span<const StepSample> samples,
                                                 int warmup_steps, int max_ratios) {
  PIPEPLAN_ASSIGN_OR_RETURN(StepMeans means, MeansPerStep(samples, warmup_steps));
  ActionSpread out;
  for (auto& [device, kinds] : means) {
    std::vector<std::vector<double>>& mine = out.ratios[device];
    mine.resize(kNumSpreadKinds);
    for (int k = 0; k < kNumSpreadKinds; ++k) {
      std::vector<double>& m = kinds[k];
      if (static_cast<int>(m.size()) > max_ratios) m.erase(m.begin(), m.end() - max_ratios);
      const double median = MedianOr(m, 0);
      if (!(median > 0)) continue;
      for (double v : m) mine[k].push_back(v / median);
      out.pooled[k].insert(out.pooled[k].end(), mine[k].begin(), mine[k].end());
    }
  }
  return out;
}

absl::StatusOr<StepQuantiles> SampleSteps(const schedule::PipelineSchedule& lowered,
                                          const schedule::StageCosts& costs,
                                          const std::vector<std::string>& stage_device,
                                          const ActionSpread& spread, const SpreadOptions& options,
                                          const AsRunAllReduce* allreduce,
                                          const schedule::ComputeSharing* sharing,
                                          const std::vector<std::vector<std::string>>& replicas) {
  PIPEPLAN_RETURN_IF_ERROR(CheckSampling(costs, stage_device, options, replicas));
  // SimulateShared is Simulate when nobody shares; the replicas' all-reduce
  // ends a sampled step after its own timing.
  const schedule::ComputeSharing own_processors;
  auto simulate = [&](const schedule::StageCosts& c) {
    return SimulateStep(lowered, c, sharing != nullptr ? *sharing : own_processors, allreduce);
  };
  PIPEPLAN_ASSIGN_OR_RETURN(schedule::SimulationResult at_mean, simulate(costs));
  StepQuantiles out{.mean_duration_seconds = at_mean.step_seconds};
  if (spread.empty()) {
    out.mean_seconds = out.p50_seconds = out.p90_seconds = at_mean.step_seconds;
    out.samples = 1;
    return out;
  }
  std::mt19937_64 rng(options.seed);
  // One replica's sampled step: its devices' own draws.
  auto replica_step = [&](const std::vector<std::string>& devices) -> absl::StatusOr<double> {
    const schedule::StageCosts scaled = Scaled(costs, devices, spread, rng);
    PIPEPLAN_ASSIGN_OR_RETURN(schedule::SimulationResult r, simulate(scaled));
    return r.step_seconds;
  };
  std::vector<double> steps;
  double sum = 0, wait = 0;
  for (int i = 0; i < options.samples; ++i) {
    PIPEPLAN_ASSIGN_OR_RETURN(const double own, replica_step(stage_device));
    double step = own;
    for (const std::vector<std::string>& devices : replicas) {
      PIPEPLAN_ASSIGN_OR_RETURN(const double other, replica_step(devices));
      step = std::max(step, other);
    }
    wait += step - own;
    if (!spread.step_ratios.empty()) {
      std::uniform_int_distribution<size_t> pick(0, spread.step_ratios.size() - 1);
      step *= spread.step_ratios[pick(rng)];
    }
    steps.push_back(step);
    sum += step;
  }
  out.samples = options.samples;
  out.mean_seconds = sum / options.samples;
  out.replica_wait_seconds = wait / options.samples;
  out.p50_seconds = QuantileOr(steps, 0.5, at_mean.step_seconds);
  out.p90_seconds = QuantileOr(steps, 0.9, at_mean.step_seconds);
  return out;
}

absl::StatusOr<StepQuantiles> SimulateSpread(const Graph& graph, const Cluster& cluster,
                                             const FixedPlan& plan, const AsRunOptions& as_run,
                                             const ActionSpread& spread,
                                             const SpreadOptions& options) {
  PIPEPLAN_ASSIGN_OR_RETURN(AsRunCosts in, BuildAsRunCosts(graph, cluster, plan, as_run));
  std::vector<std::string> dev;
  for (int d : plan.stage_device) dev.push_back(cluster.device(d).id);
  PIPEPLAN_ASSIGN_OR_RETURN(StepQuantiles q,
                            SampleSteps(in.lowered, in.costs, dev, spread, options,
                                        in.allreduce.empty() ? nullptr : &in.allreduce, &in.sharing,
                                        OtherReplicas(in.rank_devices, in.lowered.stage_to_rank)));
  for (double* s : {&q.mean_seconds, &q.p50_seconds, &q.p90_seconds, &q.mean_duration_seconds}) {
    *s += in.tail_seconds;
  }
  return q;
}

ActionSpread UniformSpread(double r) {
  ActionSpread out;
  constexpr int kPoints = 21;
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < kPoints; ++i) {
      out.pooled[k].push_back(1 - r + 2 * r * i / (kPoints - 1));
    }
  }
  return out;
}

}  // namespace pipeplan
