// The lattice of ideals (downward-closed node sets) of a DAG, in an order
// compatible with inclusion, with the per-ideal sums the lattice DPs charge
// (work, memory, tensors crossing the cut). Every valid split into k stages
// is a chain of k + 1 ideals from ∅ to V. Enumerated segment by segment
// between separators (separators.h); free sources are glued to their
// consumer first. The derivation: docs/partitioning.md, "Ideal-lattice DP".
// Internal to pipeplan_core.
#ifndef PIPEPLAN_CORE_PARTITION_IDEAL_LATTICE_H_
#define PIPEPLAN_CORE_PARTITION_IDEAL_LATTICE_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/partition.h"

namespace pipeplan::lattice_dp_internal {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Limits on the lattice the solver is willing to build.
struct LatticeLimits {
  int64_t max_ideals = 2'000'000;          // over all segments
  int64_t max_segment_ideals = 1'000'000;  // in one segment
  int max_segment_nodes = 512;             // mutually entangled nodes
};

// The nodes between two consecutive separators and the ideals of the
// subgraph they induce, as bitmasks over the segment-local node indices.
struct Segment {
  int sep_pos = -1;        // topological position of the separator before it
  std::vector<int> nodes;  // segment-local index -> node
  int words = 0;           // 64-bit words per mask
  int first = 0;           // global index of its first ideal (X = ∅)
  int count = 0;
  std::vector<uint64_t> masks;  // count x words
};

// The ideals with everything the DP needs, in inclusion-compatible order.
// Ideal 0 is ∅, the last one V.
struct Lattice {
  std::vector<Segment> segs;
  std::vector<int> seg_of_node, local_of_node;  // -1 for separators
  std::vector<int> glue;                        // consumer of a free source, else -1
  double glued_work = 0;                        // reference work of the glued nodes
  std::vector<int> child_begin, child;          // CSR of immediate sub-ideals
  std::vector<double> work, params, acts;
  std::vector<double> cut_bytes, cut_count;  // tensors crossing the cut (RELAY)
  std::vector<double> in_bytes, in_count;    // DIRECT bound: receive side
  std::vector<double> out_bytes, out_count;  // DIRECT bound: send side
  int size() const { return static_cast<int>(work.size()); }
};

// Enumerates the lattice. `cost` null: structure only (every attribute 0).
// RESOURCE_EXHAUSTED past `limits`; CANCELLED / DEADLINE_EXCEEDED when
// `stop` says so.
absl::StatusOr<Lattice> BuildLattice(const Graph& g, const CostModel* cost,
                                     const LatticeLimits& limits,
                                     const PartitionProblem* stop = nullptr);

// The stage of every node for a chain of ideal ids I_0 ⊊ ... ⊊ I_k: stage j
// holds I_{j+1} \ I_j; glued nodes follow their consumer.
std::vector<int> StageOfNode(const Graph& g, const Lattice& lat, const std::vector<int>& chain);

// Number of ideals (the empty set and V included) as the solver enumerates
// them; RESOURCE_EXHAUSTED past the limits.
absl::StatusOr<int64_t> CountIdeals(const Graph& g, const LatticeLimits& limits = {});

}  // namespace pipeplan::lattice_dp_internal

#endif  // PIPEPLAN_CORE_PARTITION_IDEAL_LATTICE_H_
