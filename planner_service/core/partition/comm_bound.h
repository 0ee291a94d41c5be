// A lower bound on the pipeline bottleneck from the communication every
// stage must pay, over the splits of an exact contraction; per-stage needs at
// the incumbent's objective become rows of the MILP. Internal to
// pipeplan_core.
#ifndef PIPEPLAN_CORE_PARTITION_COMM_BOUND_H_
#define PIPEPLAN_CORE_PARTITION_COMM_BOUND_H_

#include <vector>

#include "contraction.h"
#include "pipeplan/core/partition.h"

namespace pipeplan::milp_internal {

struct CommBound {
  double bound = 0;
  std::vector<double> need_at_ub;  // per stage; empty when not computed
};

// A lower bound on the bottleneck from communication every stage must pay,
// over the splits of an exact (non-lossy) contraction `c`.
//
// Take a split with bottleneck <= T. Stage j does at most
// cap_j = (T - need_j) / slowdown_j work, where need_j is a lower bound on
// its communication, so the stages 0..j hold at most P_j = sum_{i<=j} cap_i
// work and j..k-1 at most Q_j = sum_{i>=j} cap_i. A super-node X in stage j
// has all its ancestors in stages <= j and all its descendants in stages
// >= j: anc(X) <= P_j and desc(X) <= Q_j (anc/desc: work of X with all its
// ancestors/descendants). Walking back from any super-node of stage j >= 1
// through predecessors inside stage j ends at a source or at an edge A -> B
// with B in stage j and A in stage < j, which stage j receives; walking
// forward, stage j <= k-2 sends an edge or holds a sink. A source may sit in
// stage j only if at least j super-nodes do not descend from it (one for
// each earlier stage), a sink only if k-1-j super-nodes are not its
// ancestors. Hence need_j >= the cheapest qualifying receive + the cheapest
// qualifying send, each charged on the fastest link the cost model could
// use. T is impossible when some need_j > T, some stage has no qualifying
// edge, or sum_j cap_j < total work; every test only gets stricter as T
// falls, so bisection finds the bound. need_j at the incumbent's objective
// (`ub`) also bounds stage j's communication in every split at least as
// good as the incumbent, which the model uses as rows.
//
// When `c` merged free sources the bound holds for its splits; the caller
// takes min(bound, FreeSourceFallbackBound) for the original problem.
CommBound CommLowerBound(const PartitionProblem& problem, const Contraction& c, double lo,
                         double ub);

}  // namespace pipeplan::milp_internal

#endif  // PIPEPLAN_CORE_PARTITION_COMM_BOUND_H_
