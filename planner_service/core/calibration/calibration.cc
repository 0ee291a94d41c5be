#include "pipeplan/core/calibration.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/plan_costs.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/schedule/action.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan {
const DeviceFactor* CalibrationResult::Find(const std::string& device_id) const {
  for (const DeviceFactor& d : devices) {
    if (d.device_id == device_id) return &d;
  }
  return nullptr;
}

namespace {

// The planned seconds of one compute action of `stage`; a backward split in
// two gives `input_share` of the stage's backward to its input half.
double PredictedSeconds(schedule::ActionType type, const PlannedStage& stage, double input_share) {
  switch (type) {
    case schedule::ActionType::kForward:
      return stage.forward_seconds;
    case schedule::ActionType::kFullBackward:
      return stage.backward_seconds;
    case schedule::ActionType::kBackwardInput:
      return stage.backward_seconds * input_share;
    case schedule::ActionType::kBackwardWeight:
      return stage.backward_seconds * (1 - input_share);
    default:
      return 0;
  }
}

}  // namespace

std::map<std::string, int64_t> FirstCountedSteps(std::span<const StepSample> samples,
                                                 int warmup_steps) {
  std::map<std::string, std::set<int64_t>> steps_of;
  for (const StepSample& r : samples) steps_of[r.worker_id].insert(r.step);
  std::map<std::string, int64_t> first_counted;
  for (const auto& [worker, steps] : steps_of) {
    auto it = steps.begin();
    for (int i = 0; i < warmup_steps && it != steps.end(); ++i) ++it;
    first_counted[worker] = it == steps.end() ? INT64_MAX : *it;
  }
  return first_counted;
}

absl::StatusOr<CalibrationResult> EstimateDeviceFactors(std::span<const StepSample> samples,
                                                        std::span<const PlannedStage> stages,
                                                        const CalibrationOptions& options) {
  for (size_t s = 0; s < stages.size(); ++s) {
    if (!(stages[s].time_factor > 0) || !std::isfinite(stages[s].time_factor)) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage ", s, " has time factor ", stages[s].time_factor));
    }
  }
  std::map<std::string, int64_t> first_counted = FirstCountedSteps(samples, options.warmup_steps);

  std::map<std::string, std::vector<double>> ratios;  // device -> one ratio per report
  CalibrationResult out;
  const double input_share = std::clamp(options.input_grad_fraction, 0.0, 1.0);
  for (const StepSample& r : samples) {
    if (r.step < first_counted[r.worker_id]) continue;
    // measured and nominal (uncalibrated) modelled seconds per device
    std::map<std::string, std::pair<double, double>> per_device;
    for (const TimingSample& t : r.timings) {
      PIPEPLAN_ASSIGN_OR_RETURN(std::optional<schedule::Action> action,
                                schedule::ParseAction(t.action));
      if (!action || !schedule::IsCompute(action->type)) continue;
      const schedule::ActionType type = action->type;
      if (type == schedule::ActionType::kOverlapFB) continue;  // no clean split
      const int s = action->stage;
      if (s < 0 || s >= static_cast<int>(stages.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("report of worker ", r.worker_id, " step ", r.step, ": action ", t.action,
                         " names stage ", s, " but the plan has ", stages.size()));
      }
      const PlannedStage& st = stages[s];
      const double predicted = PredictedSeconds(type, st, input_share);
      if (!(t.seconds >= 0) || !std::isfinite(t.seconds)) continue;
      auto& [measured, modelled] = per_device[r.device_id.empty() ? st.device_id : r.device_id];
      measured += t.seconds;
      modelled += predicted / st.time_factor;
    }
    bool used = false;
    for (const auto& [device, mm] : per_device) {
      if (mm.second <= 0) continue;
      ratios[device].push_back(mm.first / mm.second);
      used = true;
    }
    if (used) ++out.reports_used;
  }
  std::vector<double> factors;
  for (auto& [device, v] : ratios) {
    if (static_cast<int>(v.size()) < std::max(1, options.min_samples)) continue;
    const int n = static_cast<int>(v.size());
    const double f = MedianOr(std::move(v), 1);
    if (!(f > 0) || !std::isfinite(f)) continue;
    out.devices.push_back({device, f, n});
    factors.push_back(f);
  }
  out.median_factor = MedianOr(std::move(factors), 1);
  return out;
}

absl::StatusOr<ClusterSpec> CalibratedClusterSpec(const ClusterSpec& nominal,
                                                  const std::map<std::string, double>& factors,
                                                  double default_factor,
                                                  const std::vector<std::string>& excluded) {
  auto bad = [](double f) { return !(f > 0) || !std::isfinite(f); };
  if (bad(default_factor)) {
    return absl::InvalidArgumentError(absl::StrCat("default factor ", default_factor));
  }
  const std::set<std::string> out_set(excluded.begin(), excluded.end());
  ClusterSpec out = nominal;
  out.devices.clear();
  out.links.clear();
  for (const DeviceSpec& d : nominal.devices) {
    if (out_set.contains(d.id)) continue;
    DeviceSpec c = d;
    auto it = factors.find(d.id);
    const double f = it == factors.end() ? default_factor : it->second;
    if (bad(f)) {
      return absl::InvalidArgumentError(absl::StrCat("device ", d.id, " has factor ", f));
    }
    c.flops = d.flops / f;
    out.devices.push_back(std::move(c));
  }
  if (out.devices.empty()) {
    return absl::InvalidArgumentError("every device of the cluster is excluded");
  }
  for (const LinkSpec& l : nominal.links) {
    if (!out_set.contains(l.src) && !out_set.contains(l.dst)) out.links.push_back(l);
  }
  return out;
}

absl::StatusOr<schedule::PipelineSchedule> FixedPlanSchedule(const FixedPlan& plan) {
  PIPEPLAN_ASSIGN_OR_RETURN(schedule::PipelineSchedule sched,
                            schedule::BuildSchedule(plan.schedule, plan.ranks, plan.microbatches,
                                                    std::max(1, plan.chunks_per_rank)));
  if (sched.num_stages != static_cast<int>(plan.stage_device.size())) {
    return absl::InvalidArgumentError(absl::StrCat("the schedule has ", sched.num_stages,
                                                   " stages, the plan ", plan.stage_device.size()));
  }
  return sched;
}

PlanOptions FixedPlanOptions(const FixedPlan& plan) {
  return {.global_batch = plan.global_batch,
          .optimizer_state_multiplier = plan.optimizer_state_multiplier,
          .optimizer = plan.optimizer,
          .precision = plan.precision,
          .comm_model = plan.comm_model};
}

CostModel FixedPlanCostModel(const Graph& graph, const Cluster& cluster, const FixedPlan& plan) {
  return CostModel(graph, cluster,
                   CostOptionsFor(graph, FixedPlanOptions(plan), plan.microbatches));
}

absl::StatusOr<std::vector<StageCost>> FixedPlanStageCosts(const CostModel& cost,
                                                           const FixedPlan& plan) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StageCost> stages,
                            cost.Evaluate(plan.node_stage, plan.stage_device));
  for (size_t s = 0; s < stages.size() && s < plan.stage_recompute.size(); ++s) {
    if (plan.stage_recompute[s]) ApplyRecompute(stages[s]);
  }
  return stages;
}

absl::StatusOr<FixedPlanScore> SimulateFixedPlan(const Graph& graph, const Cluster& cluster,
                                                 const FixedPlan& plan) {
  PIPEPLAN_ASSIGN_OR_RETURN(schedule::PipelineSchedule sched, FixedPlanSchedule(plan));
  const CostModel cost = FixedPlanCostModel(graph, cluster, plan);
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StageCost> stages, FixedPlanStageCosts(cost, plan));
  FixedPlanScore score;
  for (const StageCost& s : stages) score.stage_compute_seconds.push_back(s.compute_seconds());
  const schedule::StageCosts c = SimulatorCosts(stages);
  PIPEPLAN_ASSIGN_OR_RETURN(schedule::SimulationResult sim, schedule::Simulate(sched, c));
  score.step_seconds = sim.step_seconds;
  return score;
}

}  // namespace pipeplan
