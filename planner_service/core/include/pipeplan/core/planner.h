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
// This is the top of the core and the one entry point the CLI, the gRPC
// service, the benchmarks and the tests share; nothing inside the core calls
// back into it. Options and results: plan_options.h, plan_result.h; one
// partition problem alone: solve_partition.h. Thread safety: MakePlan is
// reentrant.
#ifndef PIPEPLAN_CORE_PLANNER_H_
#define PIPEPLAN_CORE_PLANNER_H_

#include "absl/status/statusor.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/placement.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/plan_result.h"

namespace pipeplan {

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

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PLANNER_H_
