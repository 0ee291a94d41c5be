// What the planner returns: the split and its stage costs, devices,
// schedule, predicted step time and bubble, the solver's report, runners-up
// and the best plan of every shape. Filled by SolvePartition
// (solve_partition.h), completed by the search, returned by MakePlan.
#ifndef PIPEPLAN_CORE_PLAN_RESULT_H_
#define PIPEPLAN_CORE_PLAN_RESULT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/partition.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan {

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
  // Why the plan ranks after every plan with compute on each stage (empty
  // when it has): PlanResult::degenerate_reason.
  std::string degenerate;
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
  // The bucket size it was modelled with (PlanOptions', default resolved).
  double allreduce_bucket_bytes = kDefaultBucketBytes;
  // A stage without compute (only when memory left no other plan), and
  // which: "stage 2 of 3 computes nothing (its 1 node, x, has no flops)";
  // empty when every stage computes.
  std::string degenerate_reason;
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

  bool degenerate() const { return !degenerate_reason.empty(); }
};

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PLAN_RESULT_H_
