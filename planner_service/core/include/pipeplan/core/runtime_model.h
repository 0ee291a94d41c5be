// A plan simulated the way the workers run it.
//
// The planner's search folds each stage's communication into its compute
// (SimulatorCosts): a cheap, conservative score for comparing candidates.
// Workers instead run the lowered schedule (InsertSendRecv): SEND and RECV
// are posted without blocking, the transfer runs once both ends are posted,
// and only the consuming compute waits for it. SimulateAsRun simulates
// exactly that, with pure compute per stage and one transfer time per stage
// boundary (relay: bytes of every edge that crosses the boundary, over the
// link between the two stages' devices), so its step time and bubble ratio
// are what a calibrated cluster predicts the workers will measure, and its
// timeline lines up action by action with the workers' reports. With a
// fitted host overhead, each SEND and RECV also holds its rank for the host
// time the workers were measured to spend posting one (SENDs and RECVs
// apart); fitted links carry their slow tail (link_calibration.h).
//
// A plan with data-parallel replicas simulates replica 0 (every replica runs
// the same stages) and ends each rank's step with its gradient all-reduce
// over its replica group, bucketed and overlapped with the last backward as
// the search models it (allreduce.h): the step ends when the last rank's
// last bucket is reduced, then the EndStep tail.
//
// Reentrant; no I/O.
#ifndef PIPEPLAN_CORE_RUNTIME_MODEL_H_
#define PIPEPLAN_CORE_RUNTIME_MODEL_H_

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/allreduce.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/cpu_pools.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/host_overhead.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"
#include "pipeplan/core/stage_time_fit.h"

namespace pipeplan {

struct AsRunResult {
  schedule::SimulationResult simulation;  // on the lowered schedule
  // Bytes that cross boundary b (stage b -> b + 1) per microbatch.
  std::vector<double> boundary_bytes;
};

struct AsRunOptions {
  bool record_timeline = false;
  // Bytes per boundary the workers were measured to ship (a boundary with 0
  // or beyond the vector keeps the modelled bytes): executors may ship
  // another size than the cost model's (the synthetic one ships the graph's
  // bytes at the graph's precision).
  std::vector<double> shipped_bytes;
  // Host seconds each SEND and RECV costs its rank, by the stage's device
  // (host_overhead.h); empty: posting is free.
  HostOverhead host_overhead;
  // Measured stage times (stage_time_fit.h): each stage's compute as the
  // executor was measured to take it, and the step's EndStep tail added to
  // the step. Null: the cost model's compute, no tail.
  // Its allreduce_ring_scale multiplies the replicas' all-reduce.
  const StageTimeFit* stage_fit = nullptr;
  // CPU workers sharing a machine's cores (cpu_pools.h): computes of ranks
  // on one pool slow each other down while they overlap. Null or empty:
  // every device computes on its own.
  const CpuPools* cpu_pools = nullptr;
};

// The replicas' gradient all-reduce of every rank, priced on the cluster.
struct AsRunAllReduce {
  std::vector<GradientBuckets> rank_buckets;  // per rank; empty: one replica
  std::vector<int> stage_rank;
  // Gradients come from the last W (zero-bubble schedules), else the last B.
  bool weight_grad_only = false;
  // Per rank: the share of its last backward the all-reduce overlaps; empty:
  // all of it. On CPUs the ring's copies and sums are CPU work, so they
  // overlap the backward only on CPUs the pool has spare (OverlapShares).
  std::vector<double> overlap_share;

  bool empty() const { return rank_buckets.empty(); }
  // Each rank's all-reduce seconds past its own last compute in `sim`, at
  // full speed (SimulateStep stretches them on a shared pool).
  std::vector<double> Exposed(const schedule::StageCosts& costs,
                              const schedule::SimulationResult& sim) const;
};

// What SimulateAsRun simulates: the lowered schedule and per-stage costs
// (compute per microbatch, transfers per boundary, host time per message).
// Callers that perturb durations (step_spread.h) start from it.
struct AsRunCosts {
  schedule::PipelineSchedule lowered;
  schedule::StageCosts costs;
  std::vector<double> boundary_bytes;
  // Seconds every step ends with after its last compute (the fit's EndStep).
  double tail_seconds = 0;
  AsRunAllReduce allreduce;
  // How the ranks load shared CPU pools; empty: they do not share.
  schedule::ComputeSharing sharing;
  // Per rank, its device id in every replica, the simulated replica's first.
  std::vector<std::vector<std::string>> rank_devices;

  // Simulates `lowered` under `costs` (which a caller may have scaled) and
  // the sharing.
  absl::StatusOr<schedule::SimulationResult> Simulate(
      const schedule::StageCosts& scaled, const schedule::SimulateOptions& options = {}) const;
  // Simulate with the all-reduce: SimulateStep's result (no tail).
  absl::StatusOr<schedule::SimulationResult> SimulateWithAllReduce(
      const schedule::StageCosts& scaled, const schedule::SimulateOptions& options = {}) const;
};

// The CPU a ring all-reduce's process keeps busy on a shared pool, per
// process: on 2 CPUs, four processes each all-reducing 25 MiB over Gloo
// (loopback) moved 0.74 GB/s each, two alone 0.65 GB/s (16 MiB) to
// 1 GB/s: the ring waits on its peer about as long as it copies and sums
// (docs/observability.md, "The ring is CPU work").
inline constexpr double kRingCpuLoad = 0.5;

// Simulates `costs` on `lowered` under `sharing`, then the all-reduce
// (`allreduce` null or empty: none): step_seconds becomes the end of the
// last compute or exposed ring, and end_work_finish_seconds each rank's
// ring end. On a shared CPU pool the exposed ring is CPU work (copies and
// sums): it runs as the rank's end work (ComputeSharing::rank_end_seconds,
// at kRingCpuLoad), stretched by the ranks still computing and stretching
// them in turn, so the pool is simulated twice.
absl::StatusOr<schedule::SimulationResult> SimulateStep(
    const schedule::PipelineSchedule& lowered, const schedule::StageCosts& costs,
    const schedule::ComputeSharing& sharing, const AsRunAllReduce* allreduce,
    const schedule::SimulateOptions& options = {});

// Per rank, its all-reduce past its own last compute in a SimulateStep
// result (empty without an all-reduce).
std::vector<double> ExposedAllReduce(const schedule::SimulationResult& step);
// The cost options the as-run model prices `plan` with (per microbatch of
// one replica); fits that price the plan node by node use the same.
CostOptions AsRunCostOptions(const Graph& graph, const FixedPlan& plan);

absl::StatusOr<AsRunCosts> BuildAsRunCosts(const Graph& graph, const Cluster& cluster,
                                           const FixedPlan& plan, const AsRunOptions& options = {});

// `plan` under `cluster`'s costs, transfers as the runtime does them.
// Errors: as SimulateFixedPlan.
absl::StatusOr<AsRunResult> SimulateAsRun(const Graph& graph, const Cluster& cluster,
                                          const FixedPlan& plan, const AsRunOptions& options = {});

// The ring scale (StageTimeFit::allreduce_ring_scale) that makes `plan`'s
// modelled exposed all-reduce (under `options`, ring scale 1) match `measured_exposed` (seconds per
// rank, medians over steps; <= 0: not measured): the ratio of the sums, in [0.01, 100]. 1 when the
// plan has no replicas or nothing was measured. Exact while a rank's gradients fit one bucket (all
// of it exposed).
absl::StatusOr<double> FitAllReduceScale(const Graph& graph, const Cluster& cluster,
                                         const FixedPlan& plan, const AsRunOptions& options,
                                         const std::vector<double>& measured_exposed);

// The ring's link bandwidth (StageTimeFit::allreduce_ring_bandwidth) from
// the workers' all-reduce probes (StepSample::allreduce_probe_seconds) on
// `plan`: each probe read back to its time alone (times min(1, capacity /
// (load x kRingCpuLoad)) of its worker's CPU pool: every rank probes at
// once) and solved for
// the link bandwidth of a ring through a replica's ranks, latencies left
// out (its chunks are a MB or more); the median. A bandwidth, not a scale
// of the modelled time: links fitted on small activations can be all
// latency, and a scale of that would carry the error to a ring of other
// bytes. nullopt without probes.
// Errors: as BuildAsRunCosts.
absl::StatusOr<std::optional<double>> FitRingBandwidthFromProbes(
    const Graph& graph, const Cluster& cluster, const FixedPlan& plan, const AsRunOptions& options,
    std::span<const StepSample> samples);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_RUNTIME_MODEL_H_
