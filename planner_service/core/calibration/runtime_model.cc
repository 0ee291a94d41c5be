#include "pipeplan/core/runtime_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/median.h"
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

// Per-stage compute of `plan` under `cluster` (recomputation applied);
// each stage's unique parameter bytes into `param_bytes`.
absl::StatusOr<schedule::StageCosts> ComputeCosts(const CostModel& cost, const FixedPlan& plan,
                                                  std::vector<double>& param_bytes) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StageCost> stages, FixedPlanStageCosts(cost, plan));
  schedule::StageCosts c;
  for (const StageCost& st : stages) param_bytes.push_back(st.param_bytes);
  for (size_t s = 0; s < stages.size(); ++s) {
    c.forward.push_back(stages[s].forward_seconds);
    c.backward_input.push_back(stages[s].backward_seconds - stages[s].weight_grad_seconds);
    c.backward_weight.push_back(stages[s].weight_grad_seconds);
    c.param_bytes.push_back(stages[s].param_state_bytes);
    c.activation_bytes.push_back(stages[s].activation_bytes);
  }
  return c;
}

// Every rank's gradient buckets over its replica group (none without
// replicas): the rank's stages' parameter bytes at the gradients' precision.
AsRunAllReduce PriceAllReduce(const Graph& graph, const Cluster& cluster, const FixedPlan& plan,
                              const PlanOptions& options, const schedule::PipelineSchedule& sched,
                              const std::vector<double>& param_bytes, const StageTimeFit* fit) {
  const double ring_scale = fit != nullptr ? fit->allreduce_ring_scale : 1;
  const double ring_bandwidth = fit != nullptr ? fit->allreduce_ring_bandwidth : 0;
  AsRunAllReduce out;
  if (plan.replica_groups.empty()) return out;
  const double gradient_scale = TrainingMemoryOf(options, graph).gradient_scale;
  std::vector<double> rank_bytes(plan.replica_groups.size(), 0.0);
  for (int s = 0; s < sched.num_stages && s < static_cast<int>(param_bytes.size()); ++s) {
    const int r = sched.stage_to_rank[s];
    if (r < static_cast<int>(rank_bytes.size())) rank_bytes[r] += param_bytes[s] * gradient_scale;
  }
  for (size_t r = 0; r < rank_bytes.size(); ++r) {
    out.rank_buckets.push_back(MakeGradientBuckets(cluster, plan.replica_groups[r], rank_bytes[r],
                                                   plan.allreduce_bucket_bytes, ring_scale, {},
                                                   ring_bandwidth));
  }
  out.stage_rank = sched.stage_to_rank;
  out.weight_grad_only = SplitsWeightGradients(sched);
  return out;
}

// Each rank's device in every replica, the simulated replica's first.
std::vector<std::vector<std::string>> RankDevices(const Cluster& cluster, const FixedPlan& plan,
                                                  const schedule::PipelineSchedule& sched) {
  std::vector<std::vector<std::string>> out(sched.num_ranks);
  for (size_t s = 0; s < plan.stage_device.size() && s < sched.stage_to_rank.size(); ++s) {
    std::vector<std::string>& devices = out[sched.stage_to_rank[s]];
    if (devices.empty()) devices.push_back(cluster.device(plan.stage_device[s]).id);
  }
  for (size_t r = 0; r < out.size() && r < plan.replica_groups.size(); ++r) {
    for (int d : plan.replica_groups[r]) {
      const std::string& id = cluster.device(d).id;
      if (std::find(out[r].begin(), out[r].end(), id) == out[r].end()) out[r].push_back(id);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<schedule::SimulationResult> AsRunCosts::Simulate(
    const schedule::StageCosts& scaled, const schedule::SimulateOptions& options) const {
  return schedule::SimulateShared(lowered, scaled, sharing, options);
}

absl::StatusOr<schedule::SimulationResult> AsRunCosts::SimulateWithAllReduce(
    const schedule::StageCosts& scaled, const schedule::SimulateOptions& options) const {
  return SimulateStep(lowered, scaled, sharing, &allreduce, options);
}

absl::StatusOr<schedule::SimulationResult> SimulateStep(const schedule::PipelineSchedule& lowered,
                                                        const schedule::StageCosts& costs,
                                                        const schedule::ComputeSharing& sharing,
                                                        const AsRunAllReduce* allreduce,
                                                        const schedule::SimulateOptions& options) {
  PIPEPLAN_ASSIGN_OR_RETURN(schedule::SimulationResult sim,
                            schedule::SimulateShared(lowered, costs, sharing, options));
  if (allreduce == nullptr || allreduce->empty()) return sim;
  const std::vector<double> exposed = allreduce->Exposed(costs, sim);
  const bool any = std::any_of(exposed.begin(), exposed.end(), [](double x) { return x > 0; });
  if (!sharing.empty() && any) {
    schedule::ComputeSharing with_ring = sharing;
    with_ring.rank_end_seconds = exposed;
    with_ring.rank_end_seconds.resize(lowered.num_ranks, 0.0);
    with_ring.end_work_load = kRingCpuLoad;
    PIPEPLAN_ASSIGN_OR_RETURN(sim, schedule::SimulateShared(lowered, costs, with_ring, options));
  } else {
    sim.end_work_finish_seconds = sim.finish_seconds;
    for (size_t r = 0; r < exposed.size() && r < sim.finish_seconds.size(); ++r) {
      sim.end_work_finish_seconds[r] += exposed[r];
    }
  }
  for (double end : sim.end_work_finish_seconds) sim.step_seconds = std::max(sim.step_seconds, end);
  return sim;
}

std::vector<double> ExposedAllReduce(const schedule::SimulationResult& step) {
  std::vector<double> out;
  for (size_t r = 0; r < step.end_work_finish_seconds.size() && r < step.finish_seconds.size();
       ++r) {
    out.push_back(std::max(0.0, step.end_work_finish_seconds[r] - step.finish_seconds[r]));
  }
  return out;
}

CostOptions AsRunCostOptions(const Graph& graph, const FixedPlan& plan) {
  // Each replica runs its share of a global batch (as the search prices it).
  const int replicas =
      plan.replica_groups.empty() ? 1 : static_cast<int>(plan.replica_groups[0].size());
  return CostOptionsFor(graph, FixedPlanOptions(plan), plan.microbatches, std::max(1, replicas));
}

std::vector<double> AsRunAllReduce::Exposed(const schedule::StageCosts& costs,
                                            const schedule::SimulationResult& sim) const {
  std::vector<double> out(rank_buckets.size(), 0.0);
  for (size_t r = 0; r < rank_buckets.size() && r < sim.finish_seconds.size(); ++r) {
    // The rank's per-microbatch backward (or W) over all its stages: the
    // overlap is never overstated (as the search's WindowsOf).
    GradientWindow w{.end = sim.finish_seconds[r]};
    for (size_t s = 0; s < stage_rank.size() && s < costs.backward_weight.size(); ++s) {
      if (stage_rank[s] != static_cast<int>(r)) continue;
      w.seconds += costs.backward_weight[s] + (weight_grad_only ? 0 : costs.backward_input[s]);
    }
    if (r < overlap_share.size()) w.seconds *= overlap_share[r];
    w.seconds = std::min(w.seconds, w.end);
    out[r] = BucketsEnd(rank_buckets[r], std::span<const GradientWindow>(&w, 1)) - w.end;
  }
  return out;
}

namespace {

// The step's end after its last compute: the ranks' longest update where
// it was fitted, else the measured least EndStep.
double TailSeconds(const StageTimeFit& fit, const std::vector<double>& stage_param_bytes,
                   const std::vector<int>& stage_rank, const schedule::ComputeSharing& sharing) {
  if (!fit.update.fitted) return fit.end_step_seconds;
  std::vector<double> rank_bytes;
  for (size_t s = 0; s < stage_param_bytes.size() && s < stage_rank.size(); ++s) {
    if (stage_rank[s] >= static_cast<int>(rank_bytes.size())) rank_bytes.resize(stage_rank[s] + 1);
    rank_bytes[stage_rank[s]] += stage_param_bytes[s];
  }
  return UpdateTailSeconds(fit.update, rank_bytes, sharing);
}

double LoadOf(const schedule::ComputeSharing& sharing, size_t r) {
  return r < sharing.rank_load.size() ? sharing.rank_load[r] : 1.0;
}

// Per pool, the load of all its ranks computing at once.
std::vector<double> PoolLoads(const schedule::ComputeSharing& sharing) {
  std::vector<double> out(sharing.pool_capacity.size(), 0.0);
  for (size_t r = 0; r < sharing.rank_pool.size(); ++r) {
    if (sharing.rank_pool[r] >= 0) out[sharing.rank_pool[r]] += LoadOf(sharing, r);
  }
  return out;
}

// Per rank, the share of its last backward its all-reduce can overlap: the
// CPUs its pool has spare while every rank on it computes, over the rank's
// load (1 for a rank with processors of its own). Empty: no rank shares.
std::vector<double> OverlapShares(const schedule::ComputeSharing& sharing, int num_ranks) {
  if (sharing.empty()) return {};
  const std::vector<double> pool_load = PoolLoads(sharing);
  std::vector<double> out(std::max(0, num_ranks), 1.0);
  for (size_t r = 0; r < out.size() && r < sharing.rank_pool.size(); ++r) {
    const int p = sharing.rank_pool[r];
    if (p < 0) continue;
    const double spare = sharing.pool_capacity[p] - pool_load[p];
    out[r] = std::clamp(spare / LoadOf(sharing, r), 0.0, 1.0);
  }
  return out;
}

}  // namespace

absl::StatusOr<AsRunCosts> BuildAsRunCosts(const Graph& graph, const Cluster& cluster,
                                           const FixedPlan& plan, const AsRunOptions& as_run) {
  PIPEPLAN_ASSIGN_OR_RETURN(schedule::PipelineSchedule sched, FixedPlanSchedule(plan));
  const int num_stages = static_cast<int>(plan.stage_device.size());
  AsRunCosts out;
  PIPEPLAN_ASSIGN_OR_RETURN(out.lowered, schedule::InsertSendRecv(sched));
  const PlanOptions options = FixedPlanOptions(plan);
  const CostModel cost(graph, cluster, AsRunCostOptions(graph, plan));
  std::vector<double> param_bytes;
  PIPEPLAN_ASSIGN_OR_RETURN(out.costs, ComputeCosts(cost, plan, param_bytes));
  out.allreduce =
      PriceAllReduce(graph, cluster, plan, options, sched, param_bytes, as_run.stage_fit);
  schedule::StageCosts& c = out.costs;
  if (as_run.stage_fit != nullptr) {
    ApplyStageTimeFit(*as_run.stage_fit, cost, plan.node_stage, plan.stage_device,
                      plan.stage_recompute, c);
    if (as_run.stage_fit->weight_pass_repeats_backward && SplitsWeightGradients(sched)) {
      // W runs the whole backward again: it costs I + W, and I comes on top.
      // The first stage's inputs are the data, which take no gradient: its I
      // differentiates nothing (the torch executor's GradLeaves), so it
      // costs nothing and its W is the whole backward.
      for (size_t s = 0; s < c.backward_weight.size(); ++s) {
        c.backward_weight[s] += c.backward_input[s];
      }
      if (!c.backward_input.empty()) c.backward_input[0] = 0;
    }
  }
  out.rank_devices = RankDevices(cluster, plan, out.lowered);
  if (as_run.cpu_pools != nullptr && !as_run.cpu_pools->empty()) {
    out.sharing = SharingOf(*as_run.cpu_pools, out.rank_devices);
  }
  out.allreduce.overlap_share = OverlapShares(out.sharing, out.lowered.num_ranks);
  if (as_run.stage_fit != nullptr) {
    out.tail_seconds =
        TailSeconds(*as_run.stage_fit, param_bytes, sched.stage_to_rank, out.sharing);
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
      in.SimulateWithAllReduce(in.costs, {.record_timeline = as_run.record_timeline}));
  out.simulation.step_seconds += in.tail_seconds;
  return out;
}

absl::StatusOr<double> FitAllReduceScale(const Graph& graph, const Cluster& cluster,
                                         const FixedPlan& plan, const AsRunOptions& options,
                                         const std::vector<double>& measured_exposed) {
  if (plan.replica_groups.empty()) return 1.0;
  AsRunOptions unscaled = options;
  StageTimeFit fit;
  if (options.stage_fit != nullptr) fit = *options.stage_fit;
  fit.allreduce_ring_scale = 1;
  unscaled.stage_fit = &fit;
  unscaled.record_timeline = false;
  PIPEPLAN_ASSIGN_OR_RETURN(AsRunCosts in, BuildAsRunCosts(graph, cluster, plan, unscaled));
  PIPEPLAN_ASSIGN_OR_RETURN(schedule::SimulationResult sim, in.SimulateWithAllReduce(in.costs));
  const std::vector<double> modelled = ExposedAllReduce(sim);
  double measured_sum = 0, modelled_sum = 0;
  for (size_t r = 0; r < modelled.size() && r < measured_exposed.size(); ++r) {
    if (!(measured_exposed[r] > 0) || !(modelled[r] > 0)) continue;
    measured_sum += measured_exposed[r];
    modelled_sum += modelled[r];
  }
  if (!(modelled_sum > 0)) return 1.0;
  return std::clamp(measured_sum / modelled_sum, 0.01, 100.0);
}

absl::StatusOr<std::optional<double>> FitRingBandwidthFromProbes(
    const Graph& graph, const Cluster& cluster, const FixedPlan& plan, const AsRunOptions& options,
    std::span<const StepSample> samples) {
  PIPEPLAN_ASSIGN_OR_RETURN(AsRunCosts in, BuildAsRunCosts(graph, cluster, plan, options));
  // The worker probes over its replica's pipeline: a ring of every rank.
  const int ranks = in.lowered.num_ranks;
  if (ranks < 2) return std::nullopt;
  const std::vector<double> pool_load = PoolLoads(in.sharing);
  // 2 (n - 1) steps, each moving bytes / n over every link
  // (AllReduceRing::Seconds), solved for the bandwidth. Latencies are left
  // out: a probe's chunks are a MB or more, where a link's latency is tens
  // of microseconds, while one fitted on small activations (or a ring link
  // no activation crossed) can be a millisecond off, times 2 (n - 1).
  const double n = ranks;
  std::vector<double> bandwidths;
  for (const StepSample& s : samples) {
    if (!(s.allreduce_probe_seconds > 0) || !(s.allreduce_probe_bytes > 0)) continue;
    double alone = s.allreduce_probe_seconds;
    const int p = s.rank >= 0 && s.rank < static_cast<int>(in.sharing.rank_pool.size())
                      ? in.sharing.rank_pool[s.rank]
                      : -1;
    if (p >= 0) alone *= std::min(1.0, in.sharing.pool_capacity[p] / (pool_load[p] * kRingCpuLoad));
    bandwidths.push_back(2 * (n - 1) / n * s.allreduce_probe_bytes / alone);
  }
  if (bandwidths.empty()) return std::nullopt;
  return MedianOr(std::move(bandwidths), 0.0);
}

}  // namespace pipeplan
