#include "pipeplan/core/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
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

std::unique_ptr<Partitioner> MakePartitioner(PartitionMethod method) {
  switch (method) {
    case PartitionMethod::kDp:
      return MakeChainDpPartitioner();
    case PartitionMethod::kIdealDp:
      return MakeLatticeDpPartitioner();
    case PartitionMethod::kMilp:
      return MakeMilpPartitioner();
    case PartitionMethod::kUniform:
      return MakeUniformPartitioner();
    case PartitionMethod::kParams:
      return MakeParamsPartitioner();
    case PartitionMethod::kTime:
      return MakeTimeBlockPartitioner();
    case PartitionMethod::kAuto:
      break;
  }
  return nullptr;
}

double Gap(double objective, double lower_bound) {
  if (!(objective > 0) || std::isinf(objective)) return 0;
  return std::max(0.0, (objective - lower_bound) / objective);
}

}  // namespace

TrainingMemory TrainingMemoryOf(const PlanOptions& options, const Graph& graph) {
  return TrainingMemoryFor(options.optimizer, options.precision, options.optimizer_state_multiplier,
                           graph.element_bytes());
}

CostOptions CostOptionsFor(const Graph& graph, const PlanOptions& options, int microbatches,
                           int replicas) {
  const TrainingMemory memory = TrainingMemoryOf(options, graph);
  CostOptions co{.comm_model = options.comm_model,
                 .optimizer_state_multiplier = memory.param_state_factor - 2,
                 .tensor_scale = memory.tensor_scale,
                 .loss_workspace = true};
  if (options.global_batch > 0 && graph.batch_size() > 0 && microbatches > 0) {
    const double samples =
        static_cast<double>(options.global_batch) / std::max(1, replicas) / microbatches;
    co.sample_scale = samples / graph.batch_size();
  }
  return co;
}

schedule::StageCosts SimulatorCosts(std::span<const StageCost> stages) {
  schedule::StageCosts c;
  for (const StageCost& s : stages) {
    c.forward.push_back(s.forward_seconds + s.forward_comm_seconds);
    c.backward_input.push_back(s.backward_seconds - s.weight_grad_seconds +
                               s.backward_comm_seconds);
    c.backward_weight.push_back(s.weight_grad_seconds);
    c.param_bytes.push_back(s.param_state_bytes);
    c.activation_bytes.push_back(s.activation_bytes);
  }
  return c;
}

std::string_view PartitionMethodName(PartitionMethod method) {
  switch (method) {
    case PartitionMethod::kAuto:
      return "auto";
    case PartitionMethod::kDp:
      return "dp";
    case PartitionMethod::kMilp:
      return "milp";
    case PartitionMethod::kUniform:
      return "uniform";
    case PartitionMethod::kParams:
      return "params";
    case PartitionMethod::kTime:
      return "time";
    case PartitionMethod::kIdealDp:
      return "ideal_dp";
  }
  return "unknown";
}

absl::StatusOr<PartitionMethod> ParsePartitionMethod(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  for (PartitionMethod m : {PartitionMethod::kAuto, PartitionMethod::kDp, PartitionMethod::kMilp,
                            PartitionMethod::kUniform, PartitionMethod::kParams,
                            PartitionMethod::kTime, PartitionMethod::kIdealDp}) {
    if (lower == PartitionMethodName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown method \"", lower, "\" (auto, dp, ideal_dp, milp, uniform, params, time)"));
}

absl::StatusOr<PlanResult> SolvePartition(const PartitionProblem& problem, PartitionMethod method) {
  const absl::Time start = absl::Now();
  PlanResult result;
  double lower = BalanceLowerBound(problem);
  std::optional<Partition> best;
  std::string best_method;
  absl::Status first_error = absl::OkStatus();

  auto run = [&](PartitionMethod m, const PartitionProblem& prob) {
    const absl::Time t0 = absl::Now();
    auto got = MakePartitioner(m)->Solve(prob);
    MethodOutcome outcome{.method = std::string(PartitionMethodName(m)),
                          .seconds = absl::ToDoubleSeconds(absl::Now() - t0)};
    if (!got.ok()) {
      outcome.note = std::string(got.status().message());
      // The DP's memory error carries the memory needed; prefer it.
      if (first_error.ok() || got.status().code() == absl::StatusCode::kFailedPrecondition) {
        if (first_error.code() != absl::StatusCode::kFailedPrecondition) first_error = got.status();
      }
    } else {
      outcome.note = got->note;
      result.nodes_explored += got->nodes_explored;
      if (got->contracted_nodes > 0) result.contracted_nodes = got->contracted_nodes;
      lower = std::max(lower, got->lower_bound);
      if (got->fits_memory) {
        outcome.objective = got->objective;
        if (!best || got->objective < best->objective) {
          best = std::move(*got);
          best_method = outcome.method;
        }
      } else {
        outcome.note = absl::StrCat("does not fit in memory; ", outcome.note);
      }
    }
    result.candidates.push_back(std::move(outcome));
  };

  if (method != PartitionMethod::kAuto) {
    run(method, problem);
  } else {
    // Cheap methods first; the exact DAG solvers run only while the proven
    // gap is above the target, and the MILP last, warm-started from the best
    // split so far so it can only improve on it.
    for (PartitionMethod m : {PartitionMethod::kDp, PartitionMethod::kTime,
                              PartitionMethod::kParams, PartitionMethod::kUniform}) {
      if (problem.ShouldStop() && best) break;
      run(m, problem);
    }
    auto gap_open = [&] { return !best || Gap(best->objective, lower) > problem.relative_gap; };
    if (gap_open() && !(problem.ShouldStop() && best)) run(PartitionMethod::kIdealDp, problem);
    // Also when nothing fit so far: the MILP searches every DAG split, not
    // one order, so it may find a split that fits in memory.
    if (gap_open() && !problem.ShouldStop()) {
      PartitionProblem warm = problem;
      std::vector<int> incumbent;
      if (best) incumbent = best->stage_of_node;
      warm.warm_start = incumbent;
      run(PartitionMethod::kMilp, warm);
    }
  }
  if (!best) {
    if (!first_error.ok()) return first_error;
    return absl::FailedPreconditionError("no method found a split that fits in memory");
  }
  // The solvers charge every tensor's gradient; with outputs that carry none
  // only the balance bound is sure to hold.
  if (problem.graph().has_outputs_without_grad()) lower = BalanceLowerBound(problem);
  lower = std::min(lower, best->objective);
  result.partition = std::move(*best);
  result.method = best_method;
  result.lower_bound = lower;
  result.partition.lower_bound = lower;
  result.gap = Gap(result.partition.objective, lower);
  result.stage_device = problem.stage_device;
  result.stage_inflight = problem.stage_inflight;
  result.solve_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

namespace {

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
  const search::SearchContext context{
      .graph = &graph,
      .groups = groups ? &*groups : nullptr,
      .cluster = &cluster,
      .options = &options,
      .device_class = DeviceClasses(cluster),
      .deadline = std::min(options.deadline, start + absl::Seconds(limit)),
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
