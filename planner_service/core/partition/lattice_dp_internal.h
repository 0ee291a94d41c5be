// Internals of the ideal-lattice DP (lattice_dp.cc), exposed for tests only.
#ifndef PIPEPLAN_CORE_PARTITION_LATTICE_DP_INTERNAL_H_
#define PIPEPLAN_CORE_PARTITION_LATTICE_DP_INTERNAL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/partition.h"

namespace pipeplan::lattice_dp_internal {

// Limits on the lattice the solver is willing to build.
struct LatticeLimits {
  int64_t max_ideals = 2'000'000;          // over all segments
  int64_t max_segment_ideals = 1'000'000;  // in one segment
  int max_segment_nodes = 512;             // mutually entangled nodes
};

// Per node: whether it is a separator, i.e. comparable (ancestor or
// descendant) with every other node. O(n + m).
std::vector<char> FindSeparators(const Graph& g);
// The same over the graph without the `skip` nodes and their edges.
std::vector<char> FindSeparators(const Graph& g, const std::vector<char>& skip);

// Number of ideals (downward-closed node sets, the empty set and V included)
// as the solver enumerates them; RESOURCE_EXHAUSTED past the limits.
absl::StatusOr<int64_t> CountIdeals(const Graph& g, const LatticeLimits& limits = {});

// The DIRECT pair DP alone, memory ignored, no limit: its optimum over
// chains with every stage non-empty (`value`, infinity when none), over
// chains that may leave stages empty when free sources are glued (`bound`),
// the split of `value` and the pair charges it merged. Links: the fastest
// (a lower bound) or the slowest (an upper bound) per stage. `prune` off
// turns off the clamped rounds and the separable skips (for tests).
struct PairDpResult {
  double value = 0, bound = 0;
  std::vector<int> stage_of_node;
  int64_t pairs = 0;
};
absl::StatusOr<PairDpResult> DirectPairOptimum(const PartitionProblem& problem, bool prune,
                                               bool slowest_links);

}  // namespace pipeplan::lattice_dp_internal

#endif  // PIPEPLAN_CORE_PARTITION_LATTICE_DP_INTERNAL_H_
