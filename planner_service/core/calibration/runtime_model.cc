#include "pipeplan/core/runtime_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/plan_costs.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"

namespace pipeplan {
namespace {

// Per boundary, the bytes of every edge that crosses it: what the worker's
// stage plan ships (worker_daemon/src/runtime/stage_plan.cc), scaled as the cost
// model scales tensors.
std::vector<double> BoundaryBytes(const CostModel& cost, const std::vector<int>& node_stage,
                                  int num_stages) {
  std::vector<double> bytes(std::max(0, num_stages - 1), 0.0);
  const Graph& g = cost.graph();
  for (int e = 0; e < g.num_edges(); ++e) {
    const int a = node_stage[g.edge(e).src];
    const int b = node_stage[g.edge(e).dst];
    for (int boundary = a; boundary < b; ++boundary) bytes[boundary] += cost.edge_bytes(e);
  }
  return bytes;
}

// Per-stage compute of `plan` under `cluster` (recomputation applied).
absl::StatusOr<schedule::StageCosts> ComputeCosts(const CostModel& cost, const FixedPlan& plan) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StageCost> stages, FixedPlanStageCosts(cost, plan));
  schedule::StageCosts c;
  for (size_t s = 0; s < stages.size(); ++s) {
    c.forward.push_back(stages[s].forward_seconds);
    c.backward_input.push_back(stages[s].backward_seconds - stages[s].weight_grad_seconds);
    c.backward_weight.push_back(stages[s].weight_grad_seconds);
    c.param_bytes.push_back(stages[s].param_state_bytes);
    c.activation_bytes.push_back(stages[s].activation_bytes);
  }
  return c;
}

}  // namespace

absl::StatusOr<AsRunCosts> BuildAsRunCosts(const Graph& graph, const Cluster& cluster,
                                           const FixedPlan& plan, const AsRunOptions& as_run) {
  PIPEPLAN_ASSIGN_OR_RETURN(schedule::PipelineSchedule sched, FixedPlanSchedule(plan));
  const int num_stages = static_cast<int>(plan.stage_device.size());
  AsRunCosts out;
  PIPEPLAN_ASSIGN_OR_RETURN(out.lowered, schedule::InsertSendRecv(sched));
  const CostModel cost = FixedPlanCostModel(graph, cluster, plan);
  PIPEPLAN_ASSIGN_OR_RETURN(out.costs, ComputeCosts(cost, plan));
  schedule::StageCosts& c = out.costs;
  if (as_run.stage_fit != nullptr) {
    std::vector<std::string> device;
    for (int d : plan.stage_device) device.push_back(cluster.device(d).id);
    ApplyStageTimeFit(*as_run.stage_fit, device, c);
    out.tail_seconds = as_run.stage_fit->end_step_seconds;
  }
  out.boundary_bytes = BoundaryBytes(cost, plan.node_stage, num_stages);
  for (int b = 0; b + 1 < num_stages; ++b) {
    const int from = plan.stage_device[b], to = plan.stage_device[b + 1];
    if (b < static_cast<int>(as_run.shipped_bytes.size()) && as_run.shipped_bytes[b] > 0) {
      out.boundary_bytes[b] = as_run.shipped_bytes[b];
    }
    const double bytes = out.boundary_bytes[b];
    c.forward_transfer.push_back(cluster.TransferSeconds(from, to, bytes));
    c.backward_transfer.push_back(cluster.TransferSeconds(to, from, bytes));
  }
  if (!as_run.host_overhead.empty()) {
    for (int st = 0; st < num_stages; ++st) {
      const std::string& device = cluster.device(plan.stage_device[st]).id;
      c.send_host.push_back(as_run.host_overhead.SendSeconds(device));
      c.recv_host.push_back(as_run.host_overhead.RecvSeconds(device));
    }
  }
  return out;
}

absl::StatusOr<AsRunResult> SimulateAsRun(const Graph& graph, const Cluster& cluster,
                                          const FixedPlan& plan, const AsRunOptions& as_run) {
  PIPEPLAN_ASSIGN_OR_RETURN(AsRunCosts in, BuildAsRunCosts(graph, cluster, plan, as_run));
  AsRunResult out;
  out.boundary_bytes = std::move(in.boundary_bytes);
  PIPEPLAN_ASSIGN_OR_RETURN(
      out.simulation,
      schedule::Simulate(in.lowered, in.costs, {.record_timeline = as_run.record_timeline}));
  out.simulation.step_seconds += in.tail_seconds;
  return out;
}

}  // namespace pipeplan
