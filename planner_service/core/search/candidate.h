// One point of the planner's search and how it is scored: ranks, replicas,
// schedule and microbatches on a placement. The split is planned for the
// placement's worst replica (split.h); every distinct replica is then
// evaluated on its own devices and simulated; each rank's gradients are
// all-reduced over its replica group in buckets as its last backward
// produces them (allreduce.h), so the all-reduce overlaps that backward and
// the cool-down of the other ranks. The step ends when the slowest pipeline
// and the last all-reduce are done.
//
// Internal to the planner. Thread safety: reentrant.
#ifndef PIPEPLAN_CORE_SEARCH_CANDIDATE_H_
#define PIPEPLAN_CORE_SEARCH_CANDIDATE_H_

#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/cut_groups.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/placement.h"
#include "pipeplan/core/plan_options.h"
#include "pipeplan/core/plan_result.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"
#include "split.h"

namespace pipeplan::search {

struct Candidate {
  schedule::ScheduleKind kind = schedule::ScheduleKind::k1F1B;
  int ranks = 1;
  int replicas = 1;
  int chunks_per_rank = 1;
  int microbatches = 1;  // per replica
};

// Each schedule a search scores and its peak microbatches in flight per
// stage (a simulation with unit costs), built once: screening many
// placements of one shape asks for the same schedule on every one.
// Thread safety: one thread, like the search that owns it.
class ScheduleCache {
 public:
  struct Entry {
    schedule::PipelineSchedule schedule;
    std::vector<int> inflight;  // per stage
  };
  absl::StatusOr<std::shared_ptr<const Entry>> Of(const Candidate& candidate);
  // The entry's schedule simulated under `costs`, remembered (up to a
  // bound): alike replicas of different placements, every placement of a
  // one-rank shape say, simulate alike.
  absl::StatusOr<schedule::SimulationResult> Simulate(const Entry& entry,
                                                      const schedule::StageCosts& costs);

 private:
  std::map<std::tuple<int, int, int, int>, std::shared_ptr<const Entry>> known_;
  std::map<std::pair<const Entry*, std::vector<double>>, schedule::SimulationResult> simulated_;
};

// What every evaluation of one MakePlan call shares.
struct SearchContext {
  const Graph* graph = nullptr;
  const GroupedGraph* groups = nullptr;  // null: cut anywhere
  const Cluster* cluster = nullptr;
  const PlanOptions* options = nullptr;
  std::vector<int> device_class;                 // DeviceClasses(cluster)
  ClusterOrder order;                            // ClusterOrder::Of(cluster)
  std::vector<int> ring_position;                // RingPositions(cluster)
  SplitCache* split_cache = nullptr;             // null: every split is solved
  ScheduleCache* schedule_cache = nullptr;       // null: every schedule is built
  absl::Time deadline = absl::InfiniteFuture();  // of the whole search
  // Every solve of a split gets this long (the options' time limit), never
  // past `hard_deadline` (the request's own deadline): a method solved twice
  // gets its limit each time.
  absl::Duration solve_limit = absl::InfiniteDuration();
  absl::Time hard_deadline = absl::InfiniteFuture();
  double gap = 0.01;
};

// The candidate on `placement`, split with `method`. On FAILED_PRECONDITION
// `needed_scale` receives how much every device's memory would have to grow
// (see SolveSplit).
// `warm_start` (a stage per node of the split graph) is handed to the
// partitioner.
absl::StatusOr<PlanResult> EvaluateCandidate(const SearchContext& context,
                                             const Candidate& candidate, const Placement& placement,
                                             PartitionMethod method, double* needed_scale = nullptr,
                                             std::span<const int> warm_start = {});

// Seconds per sample (or per microbatch of the graph's batch when the batch
// cannot be rescaled): the quantity the search minimizes.
// The first stage that computes nothing, said with its nodes ("stage 2 of
// 3 computes nothing (its 1 node, x, has no flops): ..."); "" if none.
std::string DegenerateReason(const Graph& graph, const Partition& partition);

double SecondsPerUnit(const SearchContext& context, const PlanResult& plan);

}  // namespace pipeplan::search

#endif  // PIPEPLAN_CORE_SEARCH_CANDIDATE_H_
