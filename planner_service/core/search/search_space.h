// What the planner's search ranges over, as the options leave it open:
// shapes (pipeline ranks, any integer, x data-parallel replicas, using at
// most every device), schedule families, microbatch counts per replica; and
// a lower bound per shape that no placement, split or schedule can beat.
//
// Internal to the planner. Thread safety: plain functions.
#ifndef PIPEPLAN_CORE_SEARCH_SEARCH_SPACE_H_
#define PIPEPLAN_CORE_SEARCH_SEARCH_SPACE_H_

#include <vector>

#include "pipeplan/core/cluster.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan::search {

struct Shape {
  int ranks = 1;
  int replicas = 1;
};

// Every (ranks, replicas) the options allow: ranks <= the split graph's
// nodes, replicas <= max_replicas, ranks x replicas <= devices, and the
// global batch divisible by the replicas.
std::vector<Shape> ShapesToTry(const Graph& split_graph, const Cluster& cluster,
                               const PlanOptions& options);

// The options' schedule, or every family (the common default first).
std::vector<schedule::ScheduleKind> KindsToTry(const PlanOptions& options);

// Stages per rank of `kind` under the options.
int ChunksPerRank(schedule::ScheduleKind kind, const PlanOptions& options);

// Microbatches per replica, ascending: the options' count, or every divisor
// of the replica's share of the global batch (global_batch / replicas), or 4
// per rank without a global batch (costs are then per microbatch).
std::vector<int> MicrobatchesToTry(const PlanOptions& options, int ranks, int replicas);

// No plan of the shape trains faster per unit (SecondsPerUnit): the work of
// a step spread perfectly over the fastest ranks x replicas devices.
double ShapeLowerBound(const Graph& graph, const Cluster& cluster, const PlanOptions& options,
                       const Shape& shape);

}  // namespace pipeplan::search

#endif  // PIPEPLAN_CORE_SEARCH_SEARCH_SPACE_H_
