#include "pipeplan/core/partition.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan {

double StageMemoryBytes(const PartitionProblem& problem, int stage, const StageCost& cost) {
  return cost.memory_bytes(problem.stage_inflight[stage]);
}

absl::Status ValidateProblem(const PartitionProblem& problem) {
  const int k = problem.num_stages();
  const int n = problem.graph().num_nodes();
  if (k < 1 || k > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", n, " nodes into ", k, " stages"));
  }
  if (static_cast<int>(problem.stage_inflight.size()) != k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage_inflight has ", problem.stage_inflight.size(), " entries for ", k, " stages"));
  }
  if (!problem.stage_memory_cap.empty() && static_cast<int>(problem.stage_memory_cap.size()) != k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage_memory_cap has ", problem.stage_memory_cap.size(), " entries for ", k, " stages"));
  }
  for (int d : problem.stage_device) {
    if (d < 0 || d >= problem.cost->cluster().num_devices()) {
      return absl::InvalidArgumentError(absl::StrCat("stage device ", d, " is not in the cluster"));
    }
  }
  return absl::OkStatus();
}

double StageMemoryCap(const PartitionProblem& problem, int stage) {
  if (!problem.stage_memory_cap.empty()) return problem.stage_memory_cap[stage];
  return problem.cost->cluster().device(problem.stage_device[stage]).memory_bytes;
}

absl::StatusOr<Partition> MakePartition(const PartitionProblem& problem,
                                        std::vector<int> stage_of_node) {
  Partition p;
  PIPEPLAN_ASSIGN_OR_RETURN(p.stages, problem.cost->Evaluate(stage_of_node, problem.stage_device));
  p.stage_of_node = std::move(stage_of_node);
  p.objective = BottleneckSeconds(p.stages);
  for (int j = 0; j < problem.num_stages(); ++j) {
    if (StageMemoryBytes(problem, j, p.stages[j]) > StageMemoryCap(problem, j)) {
      p.fits_memory = false;
    }
  }
  return p;
}

double BalanceLowerBound(const PartitionProblem& problem) {
  const CostModel& cost = *problem.cost;
  const Graph& g = cost.graph();
  double total = 0, largest = 0;
  for (int v = 0; v < g.num_nodes(); ++v) {
    total += cost.work_ref(v);
    largest = std::max(largest, cost.work_ref(v));
  }
  // Stage j processes work w_j in w_j * slowdown_j seconds; a bottleneck T
  // lets it take at most T / slowdown_j, so T >= total / sum(1 / slowdown).
  double capacity = 0;
  double min_slowdown = std::numeric_limits<double>::infinity();
  for (int d : problem.stage_device) {
    capacity += 1 / cost.slowdown(d);
    min_slowdown = std::min(min_slowdown, cost.slowdown(d));
  }
  return std::max(total / capacity, largest * min_slowdown);
}

}  // namespace pipeplan
