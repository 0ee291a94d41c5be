#include "pipeplan/core/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/cut_groups.h"
#include "pipeplan/core/placement.h"
#include "pipeplan/core/schedule/stage_costs.h"
#include "search/search.h"

namespace pipeplan {
namespace {

using schedule::ScheduleKind;

constexpr double kDefaultTimeLimitSeconds = 10;
constexpr double kDefaultRelativeGap = 0.01;

absl::Status ValidateOptions(const Graph& graph, const Cluster& cluster, const PlanOptions& o) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (o.num_ranks < 0) return bad("options.num_ranks must be >= 0, got ", o.num_ranks);
  if (o.num_ranks > cluster.num_devices()) {
    return bad("options.num_ranks is ", o.num_ranks, " but the cluster has only ",
               cluster.num_devices(), " devices");
  }
  if (o.num_ranks > graph.num_nodes()) {
    return bad("options.num_ranks is ", o.num_ranks, " but the graph has only ", graph.num_nodes(),
               " nodes");
  }
  if (o.num_replicas < 0) return bad("options.num_replicas must be >= 0, got ", o.num_replicas);
  if (o.max_replicas < 0) return bad("options.max_replicas must be >= 0, got ", o.max_replicas);
  if (o.num_replicas > 0 && o.max_replicas > 0 && o.num_replicas > o.max_replicas) {
    return bad("options.num_replicas ", o.num_replicas, " is above options.max_replicas ",
               o.max_replicas);
  }
  if (static_cast<int64_t>(std::max(1, o.num_ranks)) * std::max(1, o.num_replicas) >
      cluster.num_devices()) {
    return bad("options.num_ranks x options.num_replicas is ", std::max(1, o.num_ranks), " x ",
               std::max(1, o.num_replicas), " but the cluster has only ", cluster.num_devices(),
               " devices");
  }
  if (o.global_batch > 0 && o.num_replicas > 0 && o.global_batch % o.num_replicas != 0) {
    return bad("options.global_batch ", o.global_batch,
               " is not divisible by options.num_replicas ", o.num_replicas);
  }
  if (o.microbatches < 0) return bad("options.microbatches must be >= 0, got ", o.microbatches);
  if (o.global_batch < 0) return bad("options.global_batch must be >= 0, got ", o.global_batch);
  if (o.global_batch > 0 && o.microbatches > 0 && o.global_batch % o.microbatches != 0) {
    return bad("options.global_batch ", o.global_batch,
               " is not divisible by options.microbatches ", o.microbatches);
  }
  if (!std::isfinite(o.optimizer_state_multiplier) || o.optimizer_state_multiplier < 0) {
    return bad("options.optimizer_state_multiplier must be a non-negative number");
  }
  if (o.chunks_per_rank < 0) return bad("options.chunks_per_rank must be >= 0");
  if (!std::isfinite(o.time_limit_seconds) || o.time_limit_seconds < 0) {
    return bad("options.time_limit_seconds must be a non-negative number");
  }
  if (!std::isfinite(o.relative_gap) || o.relative_gap < 0 || o.relative_gap >= 1) {
    return bad("options.relative_gap must be in [0, 1)");
  }
  return absl::OkStatus();
}

absl::Status CheckPlacement(const Cluster& cluster, const PlanOptions& options,
                            const Placement& placement) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (placement.ranks < 1 || placement.replicas < 1 ||
      placement.devices.size() != static_cast<size_t>(placement.ranks) * placement.replicas) {
    return bad("placement: ", placement.devices.size(), " devices for ", placement.ranks,
               " ranks x ", placement.replicas, " replicas");
  }
  if ((options.num_ranks > 0 && options.num_ranks != placement.ranks) ||
      (options.num_replicas > 0 && options.num_replicas != placement.replicas)) {
    return bad("placement: ", placement.ranks, " ranks x ", placement.replicas,
               " replicas, but the options ask for ", options.num_ranks, " x ",
               options.num_replicas);
  }
  std::vector<char> used(cluster.num_devices(), 0);
  for (int d : placement.devices) {
    if (d < 0 || d >= cluster.num_devices())
      return bad("placement: device ", d, " is not in the cluster");
    if (used[d]++) return bad("placement: device \"", cluster.device(d).id, "\" is used twice");
  }
  return absl::OkStatus();
}

// Runs the search with the options' defaults resolved.
absl::StatusOr<PlanResult> Plan(const Graph& graph, const Cluster& cluster,
                                const PlanOptions& options, const Placement* fixed) {
  PIPEPLAN_RETURN_IF_ERROR(ValidateOptions(graph, cluster, options));
  const absl::Time start = absl::Now();
  PIPEPLAN_ASSIGN_OR_RETURN(CutGranularity granularity,
                            ParseCutGranularity(options.cut_granularity));
  std::optional<GroupedGraph> groups;
  if (granularity.kind != CutGranularity::Kind::kNode) {
    PIPEPLAN_ASSIGN_OR_RETURN(groups, GroupForCuts(graph, granularity, cluster.max_flops()));
    if (options.num_ranks > groups->graph->num_nodes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "options.num_ranks is ", options.num_ranks, " but options.cut_granularity \"",
          options.cut_granularity, "\" leaves only ", groups->graph->num_nodes(), " groups"));
    }
  }
  const double limit =
      options.time_limit_seconds > 0 ? options.time_limit_seconds : kDefaultTimeLimitSeconds;
  search::SplitCache split_cache;
  search::ScheduleCache schedule_cache;
  const search::SearchContext context{
      .graph = &graph,
      .groups = groups ? &*groups : nullptr,
      .cluster = &cluster,
      .options = &options,
      .device_class = DeviceClasses(cluster),
      .order = ClusterOrder::Of(cluster),
      .ring_position = RingPositions(cluster),
      .split_cache = &split_cache,
      .schedule_cache = &schedule_cache,
      .deadline = std::min(options.deadline, start + absl::Seconds(limit)),
      .solve_limit = absl::Seconds(limit),
      .hard_deadline = options.deadline,
      .gap = options.relative_gap > 0 ? options.relative_gap : kDefaultRelativeGap};
  PIPEPLAN_ASSIGN_OR_RETURN(PlanResult best, search::RunSearch(context, fixed));
  best.solve_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return best;
}

}  // namespace

absl::StatusOr<PlanResult> MakePlan(const Graph& graph, const Cluster& cluster,
                                    const PlanOptions& options) {
  return Plan(graph, cluster, options, nullptr);
}

absl::StatusOr<PlanResult> PlanOnPlacement(const Graph& graph, const Cluster& cluster,
                                           const PlanOptions& options, const Placement& placement) {
  PIPEPLAN_RETURN_IF_ERROR(CheckPlacement(cluster, options, placement));
  return Plan(graph, cluster, options, &placement);
}

}  // namespace pipeplan
