// A lower bound on the pipeline bottleneck from the communication every
// stage must pay, over the splits of an exact contraction; per-stage needs at
// the incumbent's objective become rows of the MILP. Internal to
// pipeplan_core.
#ifndef PIPEPLAN_CORE_PARTITION_COMM_BOUND_H_
#define PIPEPLAN_CORE_PARTITION_COMM_BOUND_H_

#include <vector>

#include "partition/contraction.h"
#include "pipeplan/core/partition.h"

namespace pipeplan::milp_internal {

struct CommBound {
  double bound = 0;
  std::vector<double> need_at_ub;  // per stage; empty when not computed
};

// A lower bound on the bottleneck from communication every stage must pay,
// over the splits of an exact (non-lossy) contraction `c`, searched in
// [lo, ub] (ub: the incumbent's objective, whose per-stage needs it also
// returns). Derivation: docs/partitioning.md, "Communication lower bound".
//
// When `c` merged free sources the bound holds for its splits; the caller
// takes min(bound, FreeSourceFallbackBound) for the original problem.
CommBound CommLowerBound(const PartitionProblem& problem, const Contraction& c, double lo,
                         double ub);

}  // namespace pipeplan::milp_internal

#endif  // PIPEPLAN_CORE_PARTITION_COMM_BOUND_H_
