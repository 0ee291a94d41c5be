// Exact contraction before the ideal enumeration: nodes that cost nothing
// (no work, no parameters, at most a byte of activations, kept with the
// node they join) are merged into a neighbour where no split can be cheaper
// with them apart (docs/partitioning.md, "Zero-cost merges"):
//   * a sink whose inputs all come from one node joins it;
//   * a node with one input edge whose edges all go to one consumer, and
//     whose output is at least as large as its input, joins the consumer
//     (views, reshapes, state selects of unrolled recurrences).
// Seq2seq models unrolled over time have long runs of such nodes, and every
// one of them doubles the ideals the lattice DP must enumerate.
// Private to pipeplan_core.
#ifndef PIPEPLAN_CORE_PARTITION_ZERO_COST_MERGE_H_
#define PIPEPLAN_CORE_PARTITION_ZERO_COST_MERGE_H_

#include <optional>

#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/cut_groups.h"

namespace pipeplan {

// The merged graph, or nullopt when nothing merges.
std::optional<GroupedGraph> MergeZeroCostNodes(const CostModel& cost);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PARTITION_ZERO_COST_MERGE_H_
