// One candidate's split that fits memory exactly. The partitioners see the
// grouped graph (cut_groups.h) on the placement's worst replica; their split
// is mapped back to the graph and its memory checked exactly (kept
// activations under the schedule's in-flight counts, the loss's transient
// buffer). A stage over its cap gets its cap tightened by the shortfall and
// the split is solved again. When no split fits, the search turns on
// activation recomputation (partitioners then see one microbatch of
// activations in flight) and keeps it only on the stages that need it.
//
// Internal to the planner. Thread safety: reentrant.
#ifndef PIPEPLAN_CORE_SEARCH_SPLIT_H_
#define PIPEPLAN_CORE_SEARCH_SPLIT_H_

#include <atomic>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/cut_groups.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/plan_result.h"

namespace pipeplan::search {

struct SplitInputs {
  const Graph* graph = nullptr;          // evaluated exactly
  const GroupedGraph* groups = nullptr;  // what the partitioners split; null: the graph
  const Cluster* pipeline = nullptr;     // one device per rank (WorstReplicaCluster)
  CostOptions cost_options;              // without recomputation
  std::vector<int> stage_device;         // index into `pipeline`
  std::vector<int> stage_inflight;
  std::vector<double> stage_cap;  // memory a stage may use
  absl::Time deadline = absl::InfiniteFuture();
  // With a finite solve_limit every solve ends by min(hard_deadline, its
  // start + solve_limit) instead of `deadline`.
  absl::Duration solve_limit = absl::InfiniteDuration();
  absl::Time hard_deadline = absl::InfiniteFuture();
  double relative_gap = 0.01;
  const std::atomic<bool>* cancelled = nullptr;
  std::function<void(std::string_view)> log;
  std::span<const int> warm_start;  // on the split graph
};

struct Split {
  // The solve's report; partition.stage_of_node is on the graph and its
  // stages are evaluated exactly on `pipeline`, recomputation applied.
  PlanResult solve;
  std::vector<char> recompute;       // per stage
  std::vector<double> stage_memory;  // per stage, peak bytes
};

// FAILED_PRECONDITION when no split fits even with recomputation;
// `needed_scale` (if given) then receives how much every cap would have to
// grow for a split of the topological order to fit with recomputation.
// Other errors as SolvePartition.
absl::StatusOr<Split> SolveSplit(const SplitInputs& inputs, PartitionMethod method,
                                 double* needed_scale = nullptr);

// SolveSplit's answers within one search, by everything they depend on but
// the deadlines (which only cut a solve short): screening solves the same
// pipeline again and again (one sample per microbatch at every replica
// count's largest microbatch count, say), so each is solved once. Answers
// that are neither a split nor "does not fit" are not kept, nor those of a
// method other than the chain DP given a warm start (it may steer them).
// Thread safety: one thread, like the search that owns it.
class SplitCache {
 public:
  absl::StatusOr<Split> Solve(const SplitInputs& inputs, PartitionMethod method,
                              double* needed_scale);

 private:
  struct Answer {
    absl::StatusOr<Split> split;
    double needed_scale;
  };
  absl::flat_hash_map<std::vector<double>, Answer> answers_;
};

}  // namespace pipeplan::search

#endif  // PIPEPLAN_CORE_SEARCH_SPLIT_H_
