#include "pipeplan/server/replan/version_prediction.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "calibrated_model.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/runtime_model.h"
#include "pipeplan/server/obs/log.h"

namespace pipeplan::server {
namespace {

// The step quantiles of `plan` under `in` and the basis' spread.
absl::StatusOr<StepQuantiles> Quantiles(const DecodedPlan& plan, const PlanInputs& in,
                                        const PredictionBasis& basis) {
  PIPEPLAN_ASSIGN_OR_RETURN(FixedPlan fixed, FixedPlanOf(plan, *in.cluster, in.options));
  AsRunOptions as_run;
  if (basis.host != nullptr) as_run.host_overhead = *basis.host;
  as_run.stage_fit = basis.stage_fit;
  as_run.cpu_pools = basis.cpu_pools;
  return SimulateSpread(*in.graph, *in.cluster, fixed, as_run, basis.spread);
}

// The kind fit's extra costs (node_corrections.h), forward;backward, each
// fixed ms per action, ms per node, ms per MB of the stage's parameters:
// which of them leave-one-out chose shows as the nonzero ones.
std::string KindExtras(const StageTimeFit* fit) {
  if (fit == nullptr || !fit->kinds) return "-";
  const KindCorrections& k = *fit->kinds;
  return absl::StrFormat("%.3f,%.4f,%.4f;%.3f,%.4f,%.4f", 1e3 * k.forward_fixed_seconds,
                         1e3 * k.forward_per_node_seconds, 1e9 * k.forward_seconds_per_param_byte,
                         1e3 * k.backward_fixed_seconds, 1e3 * k.backward_per_node_seconds,
                         1e9 * k.backward_seconds_per_param_byte);
}

// Logs the per-action costs the prediction simulated (F and full B per
// stage, the step's tail, each rank's exposed all-reduce at mean durations
// and its buckets' ring time alone): what prediction_bench compares with
// the measured actions.
void LogStageCosts(const DecodedPlan& plan, const PlanInputs& in, const PredictionBasis& basis,
                   double replica_wait_seconds) {
  absl::StatusOr<FixedPlan> fixed = FixedPlanOf(plan, *in.cluster, in.options);
  if (!fixed.ok()) return;
  AsRunOptions as_run{.stage_fit = basis.stage_fit, .cpu_pools = basis.cpu_pools};
  if (basis.host != nullptr) as_run.host_overhead = *basis.host;
  absl::StatusOr<AsRunCosts> c = BuildAsRunCosts(*in.graph, *in.cluster, *fixed, as_run);
  if (!c.ok()) return;
  std::vector<std::string> f, b, exposed, ring;
  for (size_t s = 0; s < c->costs.forward.size(); ++s) {
    f.push_back(absl::StrFormat("%.3f", 1e3 * c->costs.forward[s]));
    b.push_back(
        absl::StrFormat("%.3f", 1e3 * (c->costs.backward_input[s] + c->costs.backward_weight[s])));
  }
  for (const GradientBuckets& buckets : c->allreduce.rank_buckets) {
    double seconds = 0;
    for (double x : buckets.ring_seconds) seconds += x;
    ring.push_back(absl::StrFormat("%.3f", 1e3 * seconds));
  }
  absl::StatusOr<schedule::SimulationResult> sim = c->SimulateWithAllReduce(c->costs);
  if (sim.ok()) {
    for (double x : ExposedAllReduce(*sim)) {
      exposed.push_back(absl::StrFormat("%.3f", 1e3 * x));
    }
  }
  LogInfo("version_predicted_costs",
          {{"calibrated_on_version", absl::StrCat(basis.current_version)},
           {"stage_forward_ms", absl::StrJoin(f, ",")},
           {"stage_backward_ms", absl::StrJoin(b, ",")},
           {"tail_ms", absl::StrFormat("%.3f", 1e3 * c->tail_seconds)},
           {"allreduce_exposed_ms", absl::StrJoin(exposed, ",")},
           {"allreduce_ring_ms", absl::StrJoin(ring, ",")},
           {"replica_wait_ms", absl::StrFormat("%.3f", 1e3 * replica_wait_seconds)},
           {"kind_extras", KindExtras(basis.stage_fit)}});
}

// The replaced version's side: its measured steps and its prediction under
// the same model (left 0 when it cannot be scored there, e.g. a lost device).
void AddPrevious(const PlanInputs& in, const PredictionBasis& basis, v1::VersionPrediction& out) {
  out.set_calibrated_on_version(basis.current_version);
  if (basis.current == nullptr) return;
  if (basis.samples != nullptr) {
    const std::vector<double> steps = StepMakespans(*basis.samples, basis.current->num_ranks);
    const double p50 = QuantileOr(steps, 0.5, 0);
    out.set_previous_measured_step_seconds(MedianOr(steps, 0));
    out.set_previous_measured_steps(static_cast<int>(steps.size()));
    if (p50 > 0) out.set_previous_noise_ratio((QuantileOr(steps, 0.9, p50) - p50) / p50);
  }
  absl::StatusOr<StepQuantiles> cur = Quantiles(*basis.current, in, basis);
  if (cur.ok()) out.set_previous_predicted_step_seconds(cur->PointSeconds());
}

}  // namespace

std::vector<double> StepMakespans(const std::vector<StepSample>& samples, int num_ranks) {
  std::map<int64_t, std::vector<const StepSample*>> by_step;
  for (const StepSample& s : samples) by_step[s.step].push_back(&s);
  std::vector<double> out;
  for (const auto& [step, reports] : by_step) {
    std::set<int> ranks;
    for (const StepSample* r : reports) ranks.insert(r->rank);
    if (static_cast<int>(ranks.size()) < num_ranks) continue;
    int64_t first = INT64_MAX;
    double last = 0, longest = 0;
    for (const StepSample* r : reports) first = std::min(first, r->start_unix_us);
    for (const StepSample* r : reports) {
      last = std::max(last, static_cast<double>(r->start_unix_us - first) * 1e-6 + r->step_seconds);
      longest = std::max(longest, r->step_seconds);
    }
    out.push_back(first > 0 ? last : longest);
  }
  return out;
}

double PredictionError(double predicted, double measured) {
  if (!(predicted > 0) || !(measured > 0)) return 0;
  return std::abs(predicted - measured) / measured;
}

absl::StatusOr<v1::VersionPrediction> PredictVersion(const v1::Plan& next, const PlanInputs& in,
                                                     const PredictionBasis& basis) {
  PIPEPLAN_ASSIGN_OR_RETURN(DecodedPlan decoded, DecodePlan(next));
  PIPEPLAN_ASSIGN_OR_RETURN(StepQuantiles q, Quantiles(decoded, in, basis));
  LogStageCosts(decoded, in, basis, q.replica_wait_seconds);
  v1::VersionPrediction out;
  out.set_step_seconds(q.PointSeconds());
  if (!basis.spread.empty()) {
    out.set_p50_step_seconds(q.p50_seconds);
    out.set_p90_step_seconds(q.p90_seconds);
  }
  out.set_trigger(basis.trigger);
  out.set_switch_seconds(basis.switch_seconds);
  out.set_horizon_steps(basis.horizon_steps);
  AddPrevious(in, basis, out);
  return out;
}

absl::StatusOr<v1::VersionPrediction> PredictFromCurrent(
    const JobRegistry& registry, const std::string& job_id, const v1::PlanRequest& next_request,
    const v1::Plan& next, const std::vector<std::string>& excluded, int warmup_steps,
    const GraphLimits& limits) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, registry.GetPlan(job_id, 0));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, registry.GetJob(job_id));
  absl::StatusOr<DecodedPlan> current = DecodePlan(vp.plan());
  PIPEPLAN_ASSIGN_OR_RETURN(
      CalibratedModel model,
      BuildCalibratedModel(registry, job, vp, current.ok() ? *current : DecodedPlan{},
                           {.warmup_steps = warmup_steps}));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest request,
                            CalibratedRequest(next_request, model, excluded));
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, PlanInputs::FromRequest(request, limits));
  PredictionBasis basis{.current_version = vp.version(),
                        .current = current.ok() ? &*current : nullptr,
                        .samples = &model.samples,
                        .host = &model.host,
                        .stage_fit = &model.stage_fit,
                        .cpu_pools = &model.cpu_pools,
                        .spread = model.spread,
                        .trigger = "requested"};
  return PredictVersion(next, in, basis);
}

}  // namespace pipeplan::server
