// The partitioning problem and the interface every solver implements. A
// partition assigns each node a stage so that every edge goes to the same or
// a later stage and no stage is empty; the objective is the bottleneck: the
// largest per-microbatch stage time (compute + communication) under the cost
// model, subject to each stage fitting its device's memory.
//
// Solvers return their best valid split with its exact objective (evaluated by
// CostModel::Evaluate, never by the solver's own approximation) and a lower
// bound that holds for every valid split of the graph (0 when the solver
// proves nothing). FAILED_PRECONDITION means no split fits in memory;
// DEADLINE_EXCEEDED / CANCELLED mean the solver stopped before finding any.
#ifndef PIPEPLAN_CORE_PARTITION_H_
#define PIPEPLAN_CORE_PARTITION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/core/cost_model.h"

namespace pipeplan {

struct PartitionProblem {
  const CostModel* cost = nullptr;
  // Device of each stage; the number of stages is its size.
  std::vector<int> stage_device;
  // Microbatches whose activations each stage holds at its peak (from the
  // schedule), used for the memory cap.
  std::vector<int> stage_inflight;
  // Memory each stage may use; empty means its device's whole memory. Stages
  // that share a rank (interleaved and V schedules) split its memory.
  std::vector<double> stage_memory_cap;
  // Wall-clock budget; solvers return their best incumbent when it runs out.
  absl::Time deadline = absl::InfiniteFuture();
  double relative_gap = 1e-4;
  // Optional incumbent (stage of every node) for solvers that warm-start.
  std::span<const int> warm_start;
  // Set by the caller to stop a solve early (e.g. the RPC was cancelled).
  const std::atomic<bool>* cancelled = nullptr;
  // Optional progress lines (the MILP's phase timings and bounds), called on
  // the solving thread. Solvers never write to stdout or stderr themselves.
  std::function<void(std::string_view)> log;

  int num_stages() const { return static_cast<int>(stage_device.size()); }
  const Graph& graph() const { return cost->graph(); }
  bool ShouldStop() const {
    return (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) ||
           absl::Now() >= deadline;
  }
};

struct Partition {
  std::vector<int> stage_of_node;
  std::vector<StageCost> stages;
  double objective = std::numeric_limits<double>::infinity();
  double lower_bound = 0;
  bool fits_memory = true;
  int64_t nodes_explored = 0;
  // Nodes of the contracted graph the solver worked on; 0 when it did not
  // contract.
  int contracted_nodes = 0;
  std::string note;
};

class Partitioner {
 public:
  virtual ~Partitioner() = default;
  virtual std::string_view name() const = 0;
  virtual absl::StatusOr<Partition> Solve(const PartitionProblem& problem) const = 0;
};

// INVALID_ARGUMENT unless the problem is well formed: 1 <= stages <= nodes,
// and one device, in-flight count (and memory cap, if any) per stage. Every
// solver checks this first.
absl::Status ValidateProblem(const PartitionProblem& problem);

// Evaluates `stage_of_node` exactly and fills a Partition (objective, stage
// costs, whether every stage fits its device's memory).
absl::StatusOr<Partition> MakePartition(const PartitionProblem& problem,
                                        std::vector<int> stage_of_node);

// Memory a stage needs on its device under the problem's in-flight counts.
double StageMemoryBytes(const PartitionProblem& problem, int stage, const StageCost& cost);

// Memory stage j may use: stage_memory_cap[j], or its device's memory.
double StageMemoryCap(const PartitionProblem& problem, int stage);

// A lower bound on the bottleneck that holds for every valid split: the
// largest single node on the fastest device, and perfect balance of all work
// over the stages' devices.
double BalanceLowerBound(const PartitionProblem& problem);

// The smallest factor by which every stage's memory cap must grow for some
// split of the graph's topological order to fit (1 when one fits already):
// an upper bound on what the best split needs, for telling the user how much
// memory is missing.
double MemoryScaleNeeded(const PartitionProblem& problem);

// Solvers. Baselines ignore memory when splitting (their result says whether
// it fits); the dynamic programs and the MILP respect memory caps.
std::unique_ptr<Partitioner> MakeUniformPartitioner();    // equal node counts
std::unique_ptr<Partitioner> MakeParamsPartitioner();     // equal parameter bytes
std::unique_ptr<Partitioner> MakeTimeBlockPartitioner();  // torchgpipe/DeepSpeed blocks
std::unique_ptr<Partitioner> MakeChainDpPartitioner();    // exact DP over a topological order
// Exact DP over the DAG's ideals (downward-closed node sets); declines with
// RESOURCE_EXHAUSTED when the graph has too many ideals.
std::unique_ptr<Partitioner> MakeLatticeDpPartitioner();
// CBC mixed-integer program over the (contracted) DAG, warm-started from
// problem.warm_start or the chain DP.
std::unique_ptr<Partitioner> MakeMilpPartitioner();

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PARTITION_H_
