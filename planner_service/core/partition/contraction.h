// Presolve for the MILP partitioner: contracts the model graph into a smaller
// DAG of super-nodes, every super-node being placed in one stage as a whole.
// Private to pipeplan_core (not installed under include/).
//
// Two kinds of contraction, applied in this order:
//
//  1. Free sources (EXACT FOR THE BOUND). A node with no in-edges, zero work,
//     zero activation bytes, no parameters and a single consumer node c is
//     merged into c. Take any valid split in which every stage keeps at least
//     one node that is not such a source: moving each free source into its
//     consumer's stage changes no compute and no memory and only removes
//     traffic, so the split stays valid and no stage gets slower. The only
//     splits the contraction loses have some stage made entirely of free
//     sources; such a split does all the work on at most k-1 stages, so its
//     bottleneck is at least FreeSourceFallbackBound() (balance over the
//     stages minus the slowest one). Hence
//       min(optimum of the contracted problem, FreeSourceFallbackBound())
//     is a lower bound for the original problem, and that is how the MILP
//     reports its bound when `merged_free_sources` is set.
//
//  2. Edge merges (LOSSY). An edge A -> B between super-nodes is merged when A's
//     only successor is B or B's only predecessor is A (so the contracted
//     graph stays acyclic); this covers chains of single-in/single-out nodes
//     and more. Cuts inside a merged super-node become impossible, so the
//     contracted optimum can be worse than the original one and a MILP bound
//     on the contracted problem says NOTHING about the original problem.
//     Merging stops at `target_super_nodes`; edges whose cut would be the most
//     expensive (largest tensors) are merged first, super-nodes heavier than
//     `max_super_work` are never formed, and two nodes that `keep_cuts`
//     places in different stages are never merged (so that split, e.g. the
//     warm start, stays representable and the MILP can only improve on it).
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
