// The planner: from a graph, a cluster and options to a complete training
// plan. It searches over pipeline depth (ranks: any integer), data-parallel
// width (replicas), the placement of every (replica, rank) on a device,
// schedule and microbatch count. For each candidate it partitions the graph
// (the partitioners in partition.h, planned for the placement's worst
// replica, memory caps from the schedule's in-flight microbatches, with
// activation recomputation when nothing fits without it) and scores it with
// the schedule simulator plus each rank's gradient all-reduce over its
// replica group. The winner is re-solved with the requested method (by
// default every method, MILP last, warm-started) and returned with its
// runners-up and the best plan of every (ranks, replicas) it scored.
//
// This is the one entry point the CLI, the gRPC service, the benchmarks and
// the tests share. Thread safety: MakePlan is reentrant.
#ifndef PIPEPLAN_CORE_PLANNER_H_
#define PIPEPLAN_CORE_PLANNER_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/memory_model.h"
#include "pipeplan/core/partition.h"
#include "pipeplan/core/placement.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan {

enum class PartitionMethod { kAuto, kDp, kMilp, kUniform, kParams, kTime, kIdealDp };

std::string_view PartitionMethodName(PartitionMethod method);
absl::StatusOr<PartitionMethod> ParsePartitionMethod(std::string_view name);

// Stages per rank of the looped/interleaved schedules when the request leaves
// PlanOptions::chunks_per_rank at 0; plan readers use the same default.
inline constexpr int kDefaultChunksPerRank = 2;

struct PlanOptions {
  // Pipeline ranks (devices per replica); 0 lets the planner choose. Schedules
  // with several stages per rank split the graph into ranks x
  // chunks_per_rank stages.
  int num_ranks = 0;
  // Data-parallel replicas; 0 lets the planner choose up to max_replicas
  // (0: no cap). Replicas x ranks devices are used.
  int num_replicas = 0;
  int max_replicas = 0;
  int microbatches = 0;  // per replica; 0: chosen by the planner
  int global_batch = 0;  // samples per step over all replicas; 0: per-microbatch costs
  // > 0 overrides the optimizer's state bytes per parameter byte.
  double optimizer_state_multiplier = 0;
  Optimizer optimizer = kDefaultOptimizer;
  Precision precision = kDefaultPrecision;
  // Where stages may be cut ("node", "module:DEPTH", "layer"; cut_groups.h).
  std::string cut_granularity;
  std::optional<schedule::ScheduleKind> schedule;  // nullopt: chosen by the planner
  int chunks_per_rank = 0;                         // 0: kDefaultChunksPerRank
  PartitionMethod method = PartitionMethod::kAuto;
  CommModel comm_model = CommModel::kDirect;
  double time_limit_seconds = 0;  // 0: 10 s
  double relative_gap = 0;        // 0: 0.01
  // An absolute deadline (e.g. from an RPC) that tightens the time limit.
  absl::Time deadline = absl::InfiniteFuture();
  const std::atomic<bool>* cancelled = nullptr;
  // Optional solver progress log (PartitionProblem::log) for every solve.
  std::function<void(std::string_view)> solver_log;
};

struct MethodOutcome {
  std::string method;
  std::optional<double> objective;  // absent when the method found no valid split
  double seconds = 0;
  std::string note;
};

struct PlanAlternative {
  schedule::ScheduleKind schedule;
  int microbatches = 0;
  int num_ranks = 0;
  int num_replicas = 1;
  double step_seconds = 0;
  double peak_memory_bytes = 0;
  double bubble_ratio = 0;
  int idle_devices = 0;
};

struct PlanResult {
  // The split and replica 0's stage costs.
  Partition partition;
  std::vector<int> stage_device;  // per pipeline stage, replica 0
  std::vector<int> stage_inflight;
  // Per stage: params, kept activations and the loss's transient buffer.
  std::vector<double> stage_peak_memory;
  // Per stage: recomputes its forward in the backward (memory bound).
  std::vector<char> stage_recompute;
  // Per stage: its share of its rank's gradient all-reduce, seconds.
  std::vector<double> stage_allreduce_seconds;
  int num_ranks = 0;
  int num_replicas = 1;
  // Device of every (replica, rank), replica-major: rank_device[q * num_ranks + r].
  std::vector<int> rank_device;
  // How the placement was found: "exhaustive" or "layouts".
  std::string placement;
  // (time per unit - what no plan on the cluster can beat) / time per unit,
  // the bound being a step's work spread perfectly over the fastest
  // devices: how far the whole search (placement, split, schedule) could
  // still be from optimal, bubbles and communication included.
  double search_gap = 0;
  // Step time past the slowest pipeline spent finishing all-reduces.
  double allreduce_exposed_seconds = 0;
  // A stage without compute (only when memory left no other plan).
  bool degenerate = false;
  schedule::ScheduleKind schedule = schedule::ScheduleKind::k1F1B;
  int chunks_per_rank = 1;
  int microbatches = 0;
  CommModel comm_model = CommModel::kDirect;
  double sample_scale = 1;
  double step_seconds = 0;
  double bubble_ratio = 0;
  // Solver report for the chosen split.
  std::string method;
  double lower_bound = 0;
  double gap = 0;
  double solve_seconds = 0;
  int64_t nodes_explored = 0;
  int contracted_nodes = 0;  // the MILP's contracted graph; 0 if it did not run
  std::vector<MethodOutcome> candidates;
  std::vector<PlanAlternative> alternatives;  // best first, the chosen one excluded
  // The best plan at each (ranks, replicas) scored, fastest first (the
  // chosen plan's shape included).
  std::vector<PlanAlternative> shapes;
};

// The cost model's options for `microbatches` microbatches per replica of
// `replicas`: per-sample costs are rescaled to global_batch / (replicas x
// microbatches) samples when both the global batch and the graph's
// batch_size are known; tensor sizes follow the precision.
CostOptions CostOptionsFor(const Graph& graph, const PlanOptions& options, int microbatches,
                           int replicas = 1);

// The per-parameter memory of `options` for `graph` (memory_model.h).
TrainingMemory TrainingMemoryOf(const PlanOptions& options, const Graph& graph);

// Per-stage simulator costs of evaluated stages, communication charged inside
// each stage's time as the partitioners see it. Every caller that scores a
// split by simulation uses this, so scores agree.
schedule::StageCosts SimulatorCosts(std::span<const StageCost> stages);

// INVALID_ARGUMENT names the offending option ("options.num_ranks ...");
// FAILED_PRECONDITION when no candidate fits in memory, even recomputing
// activations (naming the least memory per device a plan would need);
// DEADLINE_EXCEEDED / CANCELLED when stopped before any plan was found.
absl::StatusOr<PlanResult> MakePlan(const Graph& graph, const Cluster& cluster,
                                    const PlanOptions& options);

// The best plan on a given placement (its ranks and replicas; the options'
// num_ranks / num_replicas must be 0 or agree): the search over schedules
// and microbatches only. For scoring a placement an operator chose, and the
// oracle the placement search is tested against. INVALID_ARGUMENT for a
// placement that repeats a device or names one outside the cluster.
absl::StatusOr<PlanResult> PlanOnPlacement(const Graph& graph, const Cluster& cluster,
                                           const PlanOptions& options, const Placement& placement);

// Solves one partition problem with `method` (kAuto: every method, best valid
// split, tightest proven bound). Exposed for benchmarks and tests.
absl::StatusOr<PlanResult> SolvePartition(const PartitionProblem& problem, PartitionMethod method);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PLANNER_H_
