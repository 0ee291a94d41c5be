// What a plan request asks of the planner: pipeline shape, data-parallel
// width, batch and microbatches, memory model, cut granularity, schedule,
// partition method, time limits. Plain values; every layer of the core
// (partition call, search, calibration) reads them, MakePlan (planner.h)
// validates them.
#ifndef PIPEPLAN_CORE_PLAN_OPTIONS_H_
#define PIPEPLAN_CORE_PLAN_OPTIONS_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/memory_model.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan {

enum class PartitionMethod { kAuto, kDp, kMilp, kUniform, kParams, kTime, kIdealDp };

std::string_view PartitionMethodName(PartitionMethod method);
absl::StatusOr<PartitionMethod> ParsePartitionMethod(std::string_view name);

// Stages per rank of the looped/interleaved schedules when the request leaves
// PlanOptions::chunks_per_rank at 0; plan readers use the same default.
inline constexpr int kDefaultChunksPerRank = 2;

// DDP's default bucket_cap_mb.
inline constexpr double kDefaultBucketBytes = 25.0 * (1 << 20);

// Where a search stands, for a progress line on long searches (thousands
// of devices, --explain): it first screens the (ranks, replicas) shapes in
// the order of their lower bounds (`done` of `total`; the tail a bound rules
// out is skipped at once), then sweeps schedules and microbatch counts of
// the best few shapes.
struct SearchProgress {
  enum class Phase { kScreening, kSweeping };
  Phase phase = Phase::kScreening;
  int done = 0;
  int total = 0;
  double best_step_seconds = 0;  // the best plan's step so far; 0 before one
};

struct PlanOptions {
  // Pipeline ranks (devices per replica); 0 lets the planner choose. Schedules
  // with several stages per rank split the graph into ranks x
  // chunks_per_rank stages.
  int num_ranks = 0;
  // Data-parallel replicas; 0 lets the planner choose up to max_replicas
  // (0: no cap). Replicas x ranks devices are used.
  int num_replicas = 0;
  int max_replicas = 0;
  int microbatches = 0;  // per replica; 0: chosen by the planner
  // Samples per step over all replicas; 0: per-microbatch costs. When set,
  // each of R replicas trains global_batch / R samples per step and the
  // search ranks plans by step time (every plan trains the same samples).
  int global_batch = 0;
  // Gradient bytes per all-reduce bucket: a rank's gradients are reduced in
  // buckets as its last backward produces them, overlapped with the rest of
  // that backward (as PyTorch DDP does). 0: kDefaultBucketBytes.
  double allreduce_bucket_bytes = 0;
  // > 0 overrides the optimizer's state bytes per parameter byte.
  double optimizer_state_multiplier = 0;
  Optimizer optimizer = kDefaultOptimizer;
  Precision precision = kDefaultPrecision;
  // Where stages may be cut ("node", "module:DEPTH", "layer"; cut_groups.h).
  std::string cut_granularity;
  std::optional<schedule::ScheduleKind> schedule;  // nullopt: chosen by the planner
  int chunks_per_rank = 0;                         // 0: kDefaultChunksPerRank
  PartitionMethod method = PartitionMethod::kAuto;
  CommModel comm_model = CommModel::kDirect;
  double time_limit_seconds = 0;  // 0: 10 s
  double relative_gap = 0;        // 0: 0.01
  // An absolute deadline (e.g. from an RPC) that tightens the time limit.
  absl::Time deadline = absl::InfiniteFuture();
  const std::atomic<bool>* cancelled = nullptr;
  // Optional solver progress log (PartitionProblem::log) for every solve.
  std::function<void(std::string_view)> solver_log;
  // Optional: called on the planning thread as the search moves on.
  std::function<void(const SearchProgress&)> progress;
};

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PLAN_OPTIONS_H_
