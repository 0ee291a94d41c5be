// Presolve for the MILP partitioner: contracts the model graph into a smaller
// DAG of super-nodes, every super-node being placed in one stage as a whole.
// Private to pipeplan_core (not installed under include/).
//
// Two kinds of contraction, applied in this order:
//  1. Free sources (exact for the bound): a node with no in-edges, no work,
//     no activations, no parameters and a single consumer joins it. The
//     contracted optimum, or FreeSourceFallbackBound() when that is smaller,
//     bounds the original problem.
//  2. Edge merges (LOSSY): A -> B merges when A's only successor is B or B's
//     only predecessor is A, most expensive cut first, down to
//     `target_super_nodes`; never past `max_super_work`, never across
//     `keep_cuts`. A bound on the contracted problem then says NOTHING about
//     the original one.
// Why: docs/partitioning.md, "Contraction presolve".
//
// Super-node sums: work (reference seconds), activation bytes (per
// microbatch, scaled) and the distinct parameter groups touched. Tied
// parameters are NOT summed: the MILP charges a group once per stage over all
// super-nodes that touch it.
#ifndef PIPEPLAN_CORE_PARTITION_CONTRACTION_H_
#define PIPEPLAN_CORE_PARTITION_CONTRACTION_H_

#include <span>
#include <vector>

#include "pipeplan/core/partition.h"

namespace pipeplan {

struct ContractionOptions {
  bool merge_free_sources = true;
  // Lossy edge merging runs only while there are more super-nodes than this;
  // 0 disables it.
  int target_super_nodes = 0;
  // Upper limit on a merged super-node's reference work; <= 0: no limit.
  double max_super_work = 0;
  // Optional stage of every node; nodes in different stages stay apart.
  std::span<const int> keep_cuts;
};

struct Contraction {
  int num_super = 0;
  std::vector<int> super_of_node;              // original node -> super-node
  std::vector<std::vector<int>> members;       // super-node -> nodes, topological order
  std::vector<double> work_ref;                // sum of CostModel::work_ref
  std::vector<double> activation_bytes;        // sum of CostModel::activation_bytes
  std::vector<std::vector<int>> param_groups;  // distinct groups touched, sorted
  // Deduplicated super-node edges (A != B), sorted.
  std::vector<std::pair<int, int>> edges;
  bool merged_free_sources = false;  // step 1 merged something
  bool lossy = false;                // step 2 merged something

  // Stage of every original node from a stage of every super-node.
  std::vector<int> Expand(std::span<const int> stage_of_super) const;
  // Stage of every super-node from a stage of every node; false when some
  // super-node's members disagree.
  bool Restrict(std::span<const int> stage_of_node, std::vector<int>* stage_of_super) const;
};

Contraction Contract(const PartitionProblem& problem, const ContractionOptions& options);

// The bound every split with a stage holding no work must meet: all work on
// the other k-1 stages (the slowest stage dropped). +infinity for one stage.
double FreeSourceFallbackBound(const PartitionProblem& problem);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PARTITION_CONTRACTION_H_
