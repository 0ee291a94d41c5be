// Separators of a DAG: the nodes comparable (ancestor or descendant) with
// every other node. They cut the topological order into segments whose
// ideals are enumerated independently (ideal_lattice.h). Internal to
// pipeplan_core; tests include it directly.
#ifndef PIPEPLAN_CORE_PARTITION_SEPARATORS_H_
#define PIPEPLAN_CORE_PARTITION_SEPARATORS_H_

#include <vector>

#include "pipeplan/core/graph.h"

namespace pipeplan::lattice_dp_internal {

// Per node: whether it is a separator. O(n + m).
std::vector<char> FindSeparators(const Graph& g);
// The same over the graph without the `skip` nodes and their edges.
std::vector<char> FindSeparators(const Graph& g, const std::vector<char>& skip);

}  // namespace pipeplan::lattice_dp_internal

#endif  // PIPEPLAN_CORE_PARTITION_SEPARATORS_H_
