// One partition problem solved with one partition method, or with every
// method (kAuto: cheap ones first, the exact DAG solvers while the proven gap
// is open, the MILP last and warm-started): the best valid split, the
// tightest proven bound and what each method found. The search calls it for
// every candidate; benchmarks and tests call it directly.
// Thread safety: reentrant.
#ifndef PIPEPLAN_CORE_SOLVE_PARTITION_H_
#define PIPEPLAN_CORE_SOLVE_PARTITION_H_

#include "absl/status/statusor.h"
#include "pipeplan/core/partition.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/plan_result.h"

namespace pipeplan {

// Solves one partition problem with `method` (kAuto: every method, best valid
// split, tightest proven bound). Errors as the partitioners' (partition.h); with several
// methods, a memory error (FAILED_PRECONDITION) wins over the others.
absl::StatusOr<PlanResult> SolvePartition(const PartitionProblem& problem, PartitionMethod method);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_SOLVE_PARTITION_H_
