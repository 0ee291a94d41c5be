#include "candidate.h"

#include <algorithm>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/allreduce.h"
#include "pipeplan/core/plan_costs.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/simulator.h"
#include "split.h"

namespace pipeplan::search {
namespace {

// Microbatches in flight on each stage at its peak: simulate the schedule once
// with unit costs and read the peak activation count per stage.
absl::StatusOr<std::vector<int>> InflightPerStage(const schedule::PipelineSchedule& sched) {
  const auto costs = schedule::StageCosts::Uniform(sched.num_stages, 1, 1, 1);
  PIPEPLAN_ASSIGN_OR_RETURN(auto sim, schedule::Simulate(sched, costs));
  return sim.peak_inflight_per_stage;
}

// One replica's pipeline on its own devices.
struct ReplicaRun {
  std::vector<StageCost> stages;
  schedule::SimulationResult sim;
  int copies = 0;  // replicas with the same devices up to interchangeable ones
};

absl::StatusOr<ReplicaRun> RunReplica(const SearchContext& ctx, const CostModel& real,
                                      const Split& split, const ScheduleCache::Entry& sched,
                                      const std::vector<int>& stage_device) {
  ReplicaRun run;
  PIPEPLAN_ASSIGN_OR_RETURN(run.stages,
                            real.Evaluate(split.solve.partition.stage_of_node, stage_device));
  for (size_t s = 0; s < run.stages.size(); ++s) {
    if (split.recompute[s]) ApplyRecompute(run.stages[s]);
  }
  const schedule::StageCosts costs = SimulatorCosts(run.stages);
  PIPEPLAN_ASSIGN_OR_RETURN(run.sim, ctx.schedule_cache != nullptr
                                         ? ctx.schedule_cache->Simulate(sched, costs)
                                         : schedule::Simulate(sched.schedule, costs));
  return run;
}

// What a replica's run depends on: every rank's device speed and memory
// and the link between every two ranks (as a host pattern where no Link
// overrides them, see HostPattern). Replicas alike in these (on different
// hosts of a uniform cluster, say) run alike, whatever their devices'
// classes; a large cluster has few such kinds of replica.
std::vector<double> ReplicaKey(const Cluster& cluster, std::span<const int> host_of,
                               const Placement& placement, int q) {
  const std::vector<int> pipeline = placement.Pipeline(q);
  const bool own = std::any_of(pipeline.begin(), pipeline.end(),
                               [&](int d) { return cluster.has_own_links(d); });
  std::vector<double> key = {own ? 1.0 : 0.0};
  for (int r = 0; r < placement.ranks; ++r) {
    key.push_back(cluster.device(pipeline[r]).flops);
    key.push_back(cluster.device(pipeline[r]).memory_bytes);
  }
  if (!own) {
    const std::vector<int> pattern =
        host_of.empty() ? HostPattern(cluster, pipeline) : HostPattern(host_of, pipeline);
    key.insert(key.end(), pattern.begin(), pattern.end());
    return key;
  }
  for (int r = 0; r < placement.ranks; ++r) {
    for (int s = 0; s < placement.ranks; ++s) {
      if (s == r) continue;
      key.push_back(cluster.bandwidth(pipeline[r], pipeline[s]));
      key.push_back(cluster.latency(pipeline[r], pipeline[s]));
    }
  }
  return key;
}

// Every distinct replica, replica 0 first.
absl::StatusOr<std::vector<ReplicaRun>> RunReplicas(const SearchContext& ctx, const CostModel& real,
                                                    const Split& split,
                                                    const ScheduleCache::Entry& built,
                                                    const Placement& placement) {
  const schedule::PipelineSchedule& sched = built.schedule;
  std::vector<ReplicaRun> runs;
  std::map<std::vector<double>, size_t> seen;  // ReplicaKey -> run
  for (int q = 0; q < placement.replicas; ++q) {
    const std::vector<double> classes = ReplicaKey(*ctx.cluster, ctx.order.host_rank, placement, q);
    if (auto it = seen.find(classes); it != seen.end()) {
      ++runs[it->second].copies;
      continue;
    }
    std::vector<int> stage_device;
    for (int s = 0; s < sched.num_stages; ++s) {
      stage_device.push_back(placement.device(q, sched.stage_to_rank[s]));
    }
    PIPEPLAN_ASSIGN_OR_RETURN(ReplicaRun run, RunReplica(ctx, real, split, built, stage_device));
    run.copies = 1;
    seen.emplace(std::move(classes), runs.size());
    runs.push_back(std::move(run));
  }
  return runs;
}

// When each replica's last backward on rank r produces its gradients: the
// per-microbatch backward (or W) of the rank's stages, ending with the rank's
// last compute. With several stages on a rank all of them count, so the
// overlap is never overstated.
std::vector<GradientWindow> WindowsOf(const schedule::PipelineSchedule& sched,
                                      const std::vector<ReplicaRun>& runs, int r, bool split_w) {
  std::vector<GradientWindow> out;
  for (const ReplicaRun& run : runs) {
    GradientWindow w{.end = run.sim.finish_seconds[r]};
    for (int s = 0; s < sched.num_stages; ++s) {
      if (sched.stage_to_rank[s] != r) continue;
      const StageCost& st = run.stages[s];
      w.seconds += split_w ? st.weight_grad_seconds : st.backward_seconds;
    }
    w.seconds = std::min(w.seconds, w.end);
    out.push_back(w);
  }
  return out;
}

// Step time with every rank's gradients all-reduced in buckets during its
// last backward (allreduce.h); fills the all-reduce fields of `plan`.
void AddAllReduce(const SearchContext& ctx, const schedule::PipelineSchedule& sched,
                  const Placement& placement, const std::vector<ReplicaRun>& runs,
                  PlanResult& plan) {
  const double gradient_scale = TrainingMemoryOf(*ctx.options, *ctx.graph).gradient_scale;
  const std::vector<StageCost>& stages = runs.front().stages;
  std::vector<double> rank_bytes(placement.ranks, 0);
  for (int s = 0; s < sched.num_stages; ++s) {
    rank_bytes[sched.stage_to_rank[s]] += stages[s].param_bytes * gradient_scale;
  }
  double pipeline_step = 0, busy = 0;
  for (const ReplicaRun& run : runs) {
    pipeline_step = std::max(pipeline_step, run.sim.step_seconds);
    for (double b : run.sim.busy_seconds) busy += b * run.copies;
  }
  const bool split_w = SplitsWeightGradients(sched);
  double step = pipeline_step;
  std::vector<double> rank_seconds(placement.ranks, 0);
  for (int r = 0; r < placement.ranks; ++r) {
    const AllReduceRing ring(*ctx.cluster, placement.Group(r), ctx.ring_position);
    rank_seconds[r] = ring.Seconds(rank_bytes[r]);
    const std::vector<GradientWindow> windows = WindowsOf(sched, runs, r, split_w);
    step = std::max(step,
                    BucketedAllReduceEnd(*ctx.cluster, placement.Group(r), rank_bytes[r], windows,
                                         ctx.options->allreduce_bucket_bytes, ctx.ring_position));
  }
  plan.stage_allreduce_seconds.assign(sched.num_stages, 0);
  for (int s = 0; s < sched.num_stages; ++s) {
    const int r = sched.stage_to_rank[s];
    if (rank_bytes[r] > 0) {
      plan.stage_allreduce_seconds[s] =
          rank_seconds[r] * stages[s].param_bytes * gradient_scale / rank_bytes[r];
    }
  }
  plan.step_seconds = step;
  plan.allreduce_exposed_seconds = step - pipeline_step;
  plan.allreduce_bucket_bytes = ctx.options->allreduce_bucket_bytes > 0
                                    ? ctx.options->allreduce_bucket_bytes
                                    : kDefaultBucketBytes;
  const double slots = static_cast<double>(placement.ranks) * placement.replicas;
  plan.bubble_ratio = step > 0 ? std::max(0.0, 1 - busy / (slots * step)) : 0;
}

absl::StatusOr<std::shared_ptr<const ScheduleCache::Entry>> BuildEntry(const Candidate& c) {
  PIPEPLAN_ASSIGN_OR_RETURN(
      auto sched, schedule::BuildSchedule(c.kind, c.ranks, c.microbatches, c.chunks_per_rank));
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<int> inflight, InflightPerStage(sched));
  return std::make_shared<const ScheduleCache::Entry>(
      ScheduleCache::Entry{std::move(sched), std::move(inflight)});
}

// Simulations a search remembers: a few thousand keep the memory small.
constexpr size_t kSimulationsKept = 4096;

// Everything Simulate reads of the costs.
std::vector<double> CostsKey(const schedule::StageCosts& c) {
  static_assert(sizeof(schedule::StageCosts) == 9 * sizeof(std::vector<double>),
                "a new StageCosts field must join CostsKey");
  std::vector<double> key;
  for (const std::vector<double>* v :
       {&c.forward, &c.backward_input, &c.backward_weight, &c.param_bytes, &c.activation_bytes,
        &c.forward_transfer, &c.backward_transfer, &c.send_host, &c.recv_host}) {
    key.push_back(static_cast<double>(v->size()));  // a separator: sizes may differ
    key.insert(key.end(), v->begin(), v->end());
  }
  return key;
}

}  // namespace

absl::StatusOr<schedule::SimulationResult> ScheduleCache::Simulate(
    const Entry& entry, const schedule::StageCosts& costs) {
  std::pair<const Entry*, std::vector<double>> key(&entry, CostsKey(costs));
  if (auto it = simulated_.find(key); it != simulated_.end()) return it->second;
  PIPEPLAN_ASSIGN_OR_RETURN(schedule::SimulationResult sim,
                            schedule::Simulate(entry.schedule, costs));
  if (simulated_.size() < kSimulationsKept) simulated_.emplace(std::move(key), sim);
  return sim;
}

absl::StatusOr<std::shared_ptr<const ScheduleCache::Entry>> ScheduleCache::Of(const Candidate& c) {
  const auto key = std::tuple(static_cast<int>(c.kind), c.ranks, c.microbatches, c.chunks_per_rank);
  if (auto it = known_.find(key); it != known_.end()) return it->second;
  PIPEPLAN_ASSIGN_OR_RETURN(std::shared_ptr<const Entry> entry, BuildEntry(c));
  known_.emplace(key, entry);
  return entry;
}

absl::StatusOr<PlanResult> EvaluateCandidate(const SearchContext& ctx, const Candidate& c,
                                             const Placement& placement, PartitionMethod method,
                                             double* needed_scale,
                                             std::span<const int> warm_start) {
  PIPEPLAN_ASSIGN_OR_RETURN(
      std::shared_ptr<const ScheduleCache::Entry> built,
      ctx.schedule_cache != nullptr ? ctx.schedule_cache->Of(c) : BuildEntry(c));
  const schedule::PipelineSchedule& sched = built->schedule;
  std::vector<int> inflight = built->inflight;
  const CostOptions co = CostOptionsFor(*ctx.graph, *ctx.options, c.microbatches, c.replicas);
  const Cluster pipeline = WorstReplicaCluster(*ctx.cluster, placement, ctx.order.host_rank);
  SplitInputs in{.graph = ctx.graph,
                 .groups = ctx.groups,
                 .pipeline = &pipeline,
                 .cost_options = co,
                 .stage_inflight = inflight,
                 .deadline = ctx.deadline,
                 .solve_limit = ctx.solve_limit,
                 .hard_deadline = ctx.hard_deadline,
                 .relative_gap = ctx.gap,
                 .cancelled = ctx.options->cancelled,
                 .log = ctx.options->solver_log,
                 .warm_start = warm_start};
  for (int s = 0; s < sched.num_stages; ++s) {
    const int rank = sched.stage_to_rank[s];
    in.stage_device.push_back(rank);
    in.stage_cap.push_back(pipeline.device(rank).memory_bytes / c.chunks_per_rank);
  }
  PIPEPLAN_ASSIGN_OR_RETURN(Split split, ctx.split_cache != nullptr
                                             ? ctx.split_cache->Solve(in, method, needed_scale)
                                             : SolveSplit(in, method, needed_scale));
  const CostModel real(*ctx.graph, *ctx.cluster, co);
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<ReplicaRun> runs,
                            RunReplicas(ctx, real, split, *built, placement));
  PlanResult plan = std::move(split.solve);
  plan.partition.stages = runs.front().stages;
  plan.stage_device.clear();
  for (int s = 0; s < sched.num_stages; ++s) {
    plan.stage_device.push_back(placement.device(0, sched.stage_to_rank[s]));
  }
  plan.stage_inflight = std::move(inflight);
  plan.stage_peak_memory = std::move(split.stage_memory);
  plan.stage_recompute = std::move(split.recompute);
  plan.num_ranks = c.ranks;
  plan.num_replicas = c.replicas;
  plan.rank_device = placement.devices;
  plan.schedule = c.kind;
  plan.chunks_per_rank = c.chunks_per_rank;
  plan.microbatches = c.microbatches;
  plan.comm_model = ctx.options->comm_model;
  plan.sample_scale = co.sample_scale;
  plan.degenerate_reason = DegenerateReason(*ctx.graph, plan.partition);
  AddAllReduce(ctx, sched, placement, runs, plan);
  return plan;
}

std::string DegenerateReason(const Graph& graph, const Partition& partition) {
  const int k = static_cast<int>(partition.stages.size());
  for (int s = 0; s < k; ++s) {
    if (partition.stages[s].compute_seconds() > 0) continue;
    // Every candidate is checked (the search's hot path): name the first
    // three nodes and stop scanning there.
    const size_t n = static_cast<size_t>(partition.stages[s].num_nodes);
    std::vector<std::string> ids;
    for (int v = 0; v < graph.num_nodes() && ids.size() < 3; ++v) {
      if (partition.stage_of_node[v] == s) ids.push_back(graph.node(v).id);
    }
    if (n > 3) ids.push_back("...");
    return absl::StrCat("stage ", s, " of ", k, " computes nothing (its ", n,
                        n == 1 ? " node, " : " nodes, ", absl::StrJoin(ids, ", "),
                        n == 1 ? ", has" : ", have", " no flops): a rank that only waits");
  }
  return "";
}

double SecondsPerUnit(const SearchContext& ctx, const PlanResult& plan) {
  const bool same_samples = ctx.options->global_batch > 0 && ctx.graph->batch_size() > 0;
  if (same_samples) return plan.step_seconds;
  return plan.step_seconds / (static_cast<double>(plan.microbatches) * plan.num_replicas);
}

}  // namespace pipeplan::search
