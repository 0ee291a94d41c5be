// One CBC branch-and-cut run over a MilpModel: cut generators and
// heuristics sized to the time left, interruption inside LPs at the
// deadline or on cancellation, every incumbent collected, and a bound that
// stays valid when the run is stopped early. Internal to pipeplan_core.
#ifndef PIPEPLAN_CORE_PARTITION_CBC_SOLVE_H_
#define PIPEPLAN_CORE_PARTITION_CBC_SOLVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "milp_model.h"
#include "pipeplan/core/partition.h"

namespace pipeplan::milp_internal {

struct CbcOutcome {
  bool proven_infeasible = false;
  bool proven_optimal = false;
  double bound = -kInf;  // valid for the model
  int64_t nodes = 0;
  std::vector<std::vector<int>> candidates;  // stage of every super-node
  std::string stop;                          // why it stopped, for the note
};

// Solves `model` until it is solved or `stop_at` (or problem.cancelled),
// warm-started from `warm_super` (a stage per super-node) when given.
CbcOutcome RunCbc(const PartitionProblem& problem, const MilpModel& model,
                  const std::vector<int>* warm_super, absl::Time stop_at);

// Phase timings through the caller's log (PartitionProblem::log), if any.
void Trace(const PartitionProblem& problem, const char* what, absl::Time since);

}  // namespace pipeplan::milp_internal

#endif  // PIPEPLAN_CORE_PARTITION_CBC_SOLVE_H_
