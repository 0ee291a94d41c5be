#include "pipeplan/core/stage_time_fit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "pipeplan/core/cpu_pools.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/schedule/action.h"

namespace pipeplan {
namespace {

// Rounds of kinds fit and device residuals (FitStageKinds): each moves a
// straggler's share from its stages' kinds into its device factor.
constexpr int kResidualRounds = 2;

// Per stage, each report's mean seconds of one F and of one full backward
// (B, or I + W of a microbatch).
struct PerStage {
  std::vector<double> forward, backward;
};

// One stage's backward seconds in one report: B (or I) and W summed over
// its microbatches, and how many there were.
struct BackwardSums {
  double input = 0, weight = 0;
  int microbatches = 0;
  // Per microbatch. An executor whose W repeats the backward measures the
  // full backward in W alone (its I is extra work a fused B does not do),
  // unless the stage could not be split and I ran the full backward.
  double PerMicrobatch(bool repeats) const {
    const double full = repeats && weight > 0 ? weight : input + weight;
    return full / microbatches;
  }
};

std::map<int, PerStage> MeasuredPerAction(std::span<const StepSample> samples) {
  std::map<int, PerStage> out;
  for (const StepSample& r : samples) {
    std::map<int, std::pair<double, int>> f;  // stage -> (sum, count of microbatches)
    std::map<int, BackwardSums> b;
    for (const TimingSample& t : r.timings) {
      absl::StatusOr<std::optional<schedule::Action>> a = schedule::ParseAction(t.action);
      if (!a.ok() || !*a) continue;
      const schedule::ActionType type = (*a)->type;
      const int s = (*a)->stage;
      if (type == schedule::ActionType::kForward) {
        f[s].first += t.seconds, ++f[s].second;
      } else if (type == schedule::ActionType::kFullBackward ||
                 type == schedule::ActionType::kBackwardInput) {
        b[s].input += t.seconds, ++b[s].microbatches;
      } else if (type == schedule::ActionType::kBackwardWeight) {
        b[s].weight += t.seconds;  // same microbatch as its I
      }
    }
    for (auto& [s, v] : f) out[s].forward.push_back(v.first / v.second);
    for (auto& [s, v] : b) {
      if (v.microbatches > 0) {
        out[s].backward.push_back(v.PerMicrobatch(r.weight_pass_repeats_backward));
      }
    }
  }
  return out;
}

// Per step, the least EndStep time of any rank; median over steps.
double EndStepSeconds(std::span<const StepSample> samples) {
  std::map<int64_t, double> least;
  for (const StepSample& r : samples) {
    if (!(r.optimizer_seconds > 0)) continue;
    auto [it, added] = least.emplace(r.step, r.optimizer_seconds);
    if (!added) it->second = std::min(it->second, r.optimizer_seconds);
  }
  std::vector<double> v;
  for (const auto& [step, s] : least) v.push_back(s);
  return MedianOr(v, 0);
}

double FactorOf(const std::map<std::string, double>& m, const std::string& d, double dflt) {
  auto it = m.find(d);
  return it == m.end() ? dflt : it->second;
}

// Stage s on device d: F = own x (fixed_f + f), full B = own x (fixed_b +
// b), split into I and W in the shares the costs had.
void SetStage(const StageTimeFit& fit, const std::string& d, size_t s, double fixed_f, double f,
              double fixed_b, double b, schedule::StageCosts& c) {
  const double own = FactorOf(fit.device_factor, d, 1.0);
  const double backward = c.backward_input[s] + c.backward_weight[s];
  const double w_share = backward > 0 ? c.backward_weight[s] / backward : 0.5;
  c.forward[s] = own * (fixed_f + f);
  const double full = own * (fixed_b + b);
  c.backward_input[s] = full * (1 - w_share);
  c.backward_weight[s] = full * w_share;
}

// Each device's median of measured / priced (F + B) over its stages,
// normalised so the median device is 1. Devices that share a CPU pool
// (cpu_pools.h) run on the same cores, so they cannot differ in speed: a
// residual between them is their stages' model error, which stays with
// those nodes rather than moving with the device to another split (the
// GPT's 2-rank plan took one device's 1.45x stage residual onto twice the
// nodes and was priced 20-40% over its measured backward). They share
// their pool's median.
std::map<std::string, double> Residuals(const std::vector<MeasuredStage>& measured,
                                        const std::vector<MeasuredStage>& priced,
                                        const std::vector<std::string>& ids,
                                        const CpuPools& pools) {
  auto group_of = [&](const std::string& d) {
    auto it = pools.device_pool.find(d);
    return it == pools.device_pool.end() ? "device " + d : "pool " + pools.pools[it->second].name;
  };
  std::map<std::string, std::vector<double>> ratios;  // group -> ratios
  std::map<std::string, std::string> group;           // device -> group
  for (size_t s = 0; s < measured.size(); ++s) {
    const double m = measured[s].forward_seconds + measured[s].backward_seconds;
    const double p = priced[s].forward_seconds + priced[s].backward_seconds;
    if (measured[s].forward_seconds > 0 && measured[s].backward_seconds >= 0 && p > 0) {
      group[ids[s]] = group_of(ids[s]);
      ratios[group[ids[s]]].push_back(m / p);
    }
  }
  std::map<std::string, double> out;
  std::vector<double> medians;
  for (const auto& [d, g] : group) medians.push_back(out[d] = MedianOr(ratios[g], 1));
  const double norm = MedianOr(medians, 1);
  for (auto& [d, f] : out) f /= norm;
  return out;
}

// As RepeatedMedianLine: stages modelled alike, holding alike parameter bytes, cannot
// tell a fixed cost (or one per node or byte) from the scale; the line's
// fit through zero stands.
bool StagesDiffer(const CostModel& cost, std::span<const int> node_stage,
                  std::span<const int> stage_device, const std::vector<double>& units,
                  const std::vector<MeasuredStage>& measured) {
  const std::vector<MeasuredStage> modelled =
      PredictStageTimes(cost, KindCorrections{}, node_stage, stage_device, units);
  std::vector<double> bytes(measured.size(), 0.0);
  for (int v = 0; v < cost.graph().num_nodes(); ++v) {
    bytes[node_stage[v]] += cost.graph().node(v).param_bytes;
  }
  double lo = INFINITY, hi = 0, fewest = INFINITY, most = 0;
  for (size_t s = 0; s < measured.size(); ++s) {
    if (!(measured[s].forward_seconds > 0)) continue;
    lo = std::min(lo, modelled[s].forward_seconds), hi = std::max(hi, modelled[s].forward_seconds);
    fewest = std::min(fewest, bytes[s]), most = std::max(most, bytes[s]);
  }
  return hi > 1.2 * lo || most > 1.2 * fewest;
}

}  // namespace

StageTimeFit FitStageTimes(std::span<const StepSample> samples,
                           std::span<const PlannedStage> stages) {
  StageTimeFit fit;
  fit.end_step_seconds = EndStepSeconds(samples);
  std::vector<double> nf, mf, nb, mb;
  std::vector<int> counted;
  for (const auto& [s, m] : MeasuredPerAction(samples)) {
    if (s < 0 || s >= static_cast<int>(stages.size()) || m.forward.empty() || m.backward.empty()) {
      continue;
    }
    const PlannedStage& p = stages[s];
    nf.push_back(p.forward_seconds / p.time_factor);
    nb.push_back(p.backward_seconds / p.time_factor);
    mf.push_back(MedianOr(m.forward, 0));
    mb.push_back(MedianOr(m.backward, 0));
    counted.push_back(s);
  }
  if (counted.size() < 2) return fit;
  std::tie(fit.forward_fixed, fit.forward_scale) = RepeatedMedianLine(nf, mf);
  std::tie(fit.backward_fixed, fit.backward_scale) = RepeatedMedianLine(nb, mb);
  std::map<std::string, std::vector<double>> residual;
  for (size_t i = 0; i < counted.size(); ++i) {
    const double predicted = fit.forward_fixed + fit.forward_scale * nf[i] + fit.backward_fixed +
                             fit.backward_scale * nb[i];
    if (predicted > 0)
      residual[stages[counted[i]].device_id].push_back((mf[i] + mb[i]) / predicted);
  }
  std::vector<double> medians;
  for (auto& [device, r] : residual) medians.push_back(fit.device_factor[device] = MedianOr(r, 1));
  const double norm = MedianOr(medians, 1);
  // The line carries the median device; the factors say how the others differ.
  for (auto& [device, f] : fit.device_factor) f /= norm;
  fit.forward_fixed *= norm, fit.forward_scale *= norm;
  fit.backward_fixed *= norm, fit.backward_scale *= norm;
  fit.fitted = true;
  return fit;
}

void ApplyStageTimeFit(const StageTimeFit& fit, const std::vector<std::string>& stage_device,
                       schedule::StageCosts& c) {
  if (!fit.fitted) return;
  for (size_t s = 0; s < stage_device.size() && s < c.forward.size(); ++s) {
    const std::string& d = stage_device[s];
    const double nominal = FactorOf(fit.cluster_factor, d, fit.cluster_default_factor);
    const double backward = c.backward_input[s] + c.backward_weight[s];
    SetStage(fit, d, s, fit.forward_fixed, fit.forward_scale * c.forward[s] / nominal,
             fit.backward_fixed, fit.backward_scale * backward / nominal, c);
  }
}

void FitStageKinds(std::span<const StepSample> samples, const CostModel& cost,
                   std::span<const int> node_stage, std::span<const int> stage_device,
                   StageTimeFit& fit, const KindFitOptions& options) {
  if (!fit.fitted || static_cast<int>(node_stage.size()) != cost.graph().num_nodes()) return;
  std::vector<MeasuredStage> measured(stage_device.size());
  std::vector<std::string> ids;
  std::vector<double> units;
  for (int d : stage_device) {
    ids.push_back(cost.cluster().device(d).id);
    units.push_back(FactorOf(fit.cluster_factor, ids.back(), fit.cluster_default_factor));
  }
  for (const auto& [s, m] : MeasuredPerAction(samples)) {
    if (s >= 0 && s < static_cast<int>(stage_device.size()) && !m.forward.empty() &&
        !m.backward.empty()) {
      measured[s] = {MedianOr(m.forward, -1), MedianOr(m.backward, -1)};
    }
  }
  if (!StagesDiffer(cost, node_stage, stage_device, units, measured)) return;
  // The devices' residuals were taken against one scale for every kind, so
  // they hold the kinds' differences too: start from none, fit the kinds,
  // take the residuals against the kinds' prices, refit (a straggler's
  // stages then stop pulling its kinds' factors).
  const CpuPools pools = CpuPoolsOf(samples);
  std::map<std::string, double> own;
  std::optional<KindCorrections> kinds;
  for (int round = 0; round < kResidualRounds; ++round) {
    std::vector<MeasuredStage> nominal = measured;
    for (size_t s = 0; s < nominal.size(); ++s) {
      const double f = FactorOf(own, ids[s], 1.0);
      if (nominal[s].forward_seconds > 0) nominal[s].forward_seconds /= f;
      if (nominal[s].backward_seconds > 0) nominal[s].backward_seconds /= f;
    }
    KindFitOptions o = options;
    o.fit_fixed = true;
    absl::StatusOr<KindCorrections> k =
        FitKindCorrections(cost, node_stage, stage_device, nominal, o, units);
    if (!k.ok()) return;
    kinds = *std::move(k);
    own = Residuals(measured, PredictStageTimes(cost, *kinds, node_stage, stage_device, units), ids,
                    pools);
  }
  fit.kinds = std::move(kinds);
  fit.device_factor = std::move(own);
}

void ApplyStageTimeFit(const StageTimeFit& fit, const CostModel& cost,
                       std::span<const int> node_stage, std::span<const int> stage_device,
                       std::span<const char> stage_recompute, schedule::StageCosts& c) {
  std::vector<std::string> ids;
  for (int d : stage_device) ids.push_back(cost.cluster().device(d).id);
  if (!fit.fitted || !fit.kinds ||
      static_cast<int>(node_stage.size()) != cost.graph().num_nodes()) {
    ApplyStageTimeFit(fit, ids, c);
    return;
  }
  std::vector<double> units;
  for (const std::string& d : ids) {
    units.push_back(FactorOf(fit.cluster_factor, d, fit.cluster_default_factor));
  }
  const std::vector<MeasuredStage> priced =
      PredictStageTimes(cost, *fit.kinds, node_stage, stage_device, units);
  for (size_t s = 0; s < ids.size() && s < c.forward.size(); ++s) {
    const bool recompute = s < stage_recompute.size() && stage_recompute[s];
    // The fixed costs are in `priced`; a recomputing B runs the F again.
    const double f = priced[s].forward_seconds;
    SetStage(fit, ids[s], s, 0, f, 0, priced[s].backward_seconds + (recompute ? f : 0), c);
  }
}

}  // namespace pipeplan
