#include "pipeplan/core/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"
#include "pipeplan/core/status_macros.h"

namespace pipeplan {
namespace {

using schedule::ScheduleKind;

constexpr double kDefaultTimeLimitSeconds = 10;
constexpr double kDefaultRelativeGap = 0.01;
constexpr size_t kMaxAlternatives = 8;

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

// One point of the search: pipeline depth, schedule and microbatch count.
struct Candidate {
  ScheduleKind kind;
  int ranks;
  int chunks_per_rank;
  int microbatches;
};

struct Scored {
  Candidate candidate;
  PlanResult plan;
};

std::vector<ScheduleKind> KindsToTry(const PlanOptions& o) {
  if (o.schedule) return {*o.schedule};
  // The common default first, so it is planned before any time runs out.
  return {ScheduleKind::k1F1B,
          ScheduleKind::kInterleaved1F1B,
          ScheduleKind::kInterleavedZeroBubble,
          ScheduleKind::kZBVZeroBubble,
          ScheduleKind::kDualPipeV,
          ScheduleKind::kGPipe};
}

std::vector<int> RanksToTry(const Graph& graph, const Cluster& cluster, const PlanOptions& o) {
  if (o.num_ranks > 0) return {o.num_ranks};
  const int most = std::min(cluster.num_devices(), graph.num_nodes());
  std::set<int> ranks = {most};
  for (int p = 1; p < most; p *= 2) ranks.insert(p);
  // Deepest first: the most memory, so the likeliest to fit, is tried before
  // the time limit can run out.
  return {ranks.rbegin(), ranks.rend()};
}

std::vector<int> MicrobatchesToTry(const PlanOptions& o, int ranks) {
  if (o.microbatches > 0) return {o.microbatches};
  if (o.global_batch <= 0) {
    // Costs are per microbatch and the batch is open: more microbatches only
    // shrink the bubble while adding work, so use the usual 4 per rank.
    return {4 * ranks};
  }
  // Divisors of the global batch from `ranks` up to 16 per rank: fewer leave
  // ranks idle, more shrink microbatches past the point kernels stay efficient.
  std::vector<int> out;
  for (int m = 1; m <= o.global_batch; ++m) {
    if (o.global_batch % m == 0 && m >= std::min(ranks, o.global_batch) && m <= 16 * ranks) {
      out.push_back(m);
    }
  }
  if (out.empty()) out.push_back(o.global_batch);
  return out;
}

// Microbatches in flight on each stage at its peak: simulate the schedule once
// with unit costs and read the peak activation count per stage.
absl::StatusOr<std::vector<int>> InflightPerStage(const schedule::PipelineSchedule& sched) {
  const auto costs = schedule::StageCosts::Uniform(sched.num_stages, 1, 1, 1);
  PIPEPLAN_ASSIGN_OR_RETURN(auto sim, schedule::Simulate(sched, costs));
  return sim.peak_inflight_per_stage;
}

// Every candidate of the search: each gets its own cost model (the
// microbatch size changes per-microbatch costs), a partition and a
// simulation.
std::vector<Candidate> Candidates(const Graph& graph, const Cluster& cluster,
                                  const PlanOptions& options) {
  const int interleave =
      options.chunks_per_rank > 0 ? options.chunks_per_rank : kDefaultChunksPerRank;
  std::vector<Candidate> candidates;
  for (int ranks : RanksToTry(graph, cluster, options)) {
    for (ScheduleKind kind : KindsToTry(options)) {
      const int chunks_per_rank = schedule::StagesPerRank(kind, interleave);
      if (ranks * chunks_per_rank > graph.num_nodes()) continue;
      if (ranks == 1 && chunks_per_rank > 1 && !options.schedule) continue;  // same as GPipe
      for (int m : MicrobatchesToTry(options, ranks)) {
        candidates.push_back({kind, ranks, chunks_per_rank, m});
      }
    }
  }
  return candidates;
}

// Partitions one candidate with a method and simulates its schedule.
struct CandidateSolver {
  const Graph& graph;
  const Cluster& cluster;
  const PlanOptions& options;
  absl::Time deadline;
  double gap;

  absl::StatusOr<PlanResult> Solve(const Candidate& c, PartitionMethod method) const;
};

absl::StatusOr<PlanResult> CandidateSolver::Solve(const Candidate& c,
                                                  PartitionMethod method) const {
  PIPEPLAN_ASSIGN_OR_RETURN(
      auto sched, schedule::BuildSchedule(c.kind, c.ranks, c.microbatches, c.chunks_per_rank));
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<int> inflight, InflightPerStage(sched));
  const CostOptions co =
      CostOptionsFor(graph, options.comm_model, options.optimizer_state_multiplier,
                     options.global_batch, c.microbatches);
  // Plans hold values only, so the model lives just as long as the solve.
  const CostModel cost(graph, cluster, co);
  PartitionProblem problem{.cost = &cost,
                           .stage_inflight = inflight,
                           .deadline = deadline,
                           .relative_gap = gap,
                           .cancelled = options.cancelled,
                           .log = options.solver_log};
  for (int s = 0; s < sched.num_stages; ++s) {
    const int device = sched.stage_to_rank[s];  // rank r runs on device r
    problem.stage_device.push_back(device);
    problem.stage_memory_cap.push_back(cluster.device(device).memory_bytes / c.chunks_per_rank);
  }
  PIPEPLAN_ASSIGN_OR_RETURN(PlanResult plan, SolvePartition(problem, method));
  PIPEPLAN_ASSIGN_OR_RETURN(auto sim,
                            schedule::Simulate(sched, SimulatorCosts(plan.partition.stages)));
  plan.num_ranks = c.ranks;
  plan.schedule = c.kind;
  plan.chunks_per_rank = c.chunks_per_rank;
  plan.microbatches = c.microbatches;
  plan.comm_model = options.comm_model;
  plan.sample_scale = co.sample_scale;
  plan.step_seconds = sim.step_seconds;
  plan.bubble_ratio = sim.bubble_ratio;
  plan.stage_peak_memory.clear();
  for (int s = 0; s < sched.num_stages; ++s) {
    plan.stage_peak_memory.push_back(StageMemoryBytes(problem, s, plan.partition.stages[s]));
  }
  return plan;
}

// Every candidate that plans before the deadline, with `method`; the first
// error (a memory failure preferred) when none does.
absl::StatusOr<std::vector<Scored>> ScoreCandidates(const CandidateSolver& solver,
                                                    const std::vector<Candidate>& candidates,
                                                    PartitionMethod method) {
  std::vector<Scored> scored;
  absl::Status first_error = absl::OkStatus();
  const std::atomic<bool>* cancelled = solver.options.cancelled;
  for (const Candidate& c : candidates) {
    if (absl::Now() >= solver.deadline) {
      if (scored.empty() && first_error.ok()) {
        first_error =
            absl::DeadlineExceededError("the time limit ran out before any candidate was planned");
      }
      break;
    }
    if (cancelled != nullptr && cancelled->load()) {
      if (scored.empty()) first_error = absl::CancelledError("planning was cancelled");
      break;
    }
    auto plan = solver.Solve(c, method);
    if (!plan.ok()) {
      // Report the first memory failure: the deepest pipeline, which had the
      // most memory, so its shortfall is the one worth telling.
      if (first_error.ok() || (plan.status().code() == absl::StatusCode::kFailedPrecondition &&
                               first_error.code() != absl::StatusCode::kFailedPrecondition)) {
        first_error = plan.status();
      }
      continue;
    }
    scored.push_back({c, *std::move(plan)});
  }
  if (scored.empty()) {
    if (!first_error.ok()) return first_error;
    return absl::FailedPreconditionError("no schedule, depth and microbatch count fits");
  }
  return scored;
}

// Fastest first. With a global batch every candidate's step trains the same
// samples, so step time decides. Without one, candidates run different
// microbatch counts of the same size, so compare time per microbatch
// (throughput). (A graph without batch_size cannot be rescaled, so there
// too.)
void SortByThroughput(const Graph& graph, const PlanOptions& options, std::vector<Scored>& scored) {
  const bool same_samples = options.global_batch > 0 && graph.batch_size() > 0;
  auto seconds_per_sample = [&](const PlanResult& p) {
    return same_samples ? p.step_seconds : p.step_seconds / p.microbatches;
  };
  std::stable_sort(scored.begin(), scored.end(), [&](const Scored& a, const Scored& b) {
    return seconds_per_sample(a.plan) < seconds_per_sample(b.plan);
  });
}

// Re-solves the winning candidate with the requested method. Same
// candidate, so the refined solve's bound holds for the search's split too;
// keeps whichever split simulates faster, with the full report.
void Refine(const CandidateSolver& solver, const Candidate& candidate, PlanResult& best) {
  auto refined = solver.Solve(candidate, solver.options.method);
  if (!refined.ok()) return;
  if (refined->step_seconds <= best.step_seconds) {
    refined->lower_bound = std::max(refined->lower_bound, best.lower_bound);
    best = *std::move(refined);
  } else {
    best.lower_bound = std::max(best.lower_bound, refined->lower_bound);
    best.nodes_explored += refined->nodes_explored;
    best.candidates = std::move(refined->candidates);
  }
  best.lower_bound = std::min(best.lower_bound, best.partition.objective);
  best.partition.lower_bound = best.lower_bound;
  best.gap = Gap(best.partition.objective, best.lower_bound);
}

}  // namespace

CostOptions CostOptionsFor(const Graph& graph, CommModel comm, double optimizer_state_multiplier,
                           int global_batch, int microbatches) {
  CostOptions co{.comm_model = comm, .optimizer_state_multiplier = optimizer_state_multiplier};
  if (global_batch > 0 && graph.batch_size() > 0 && microbatches > 0) {
    co.sample_scale = (static_cast<double>(global_batch) / microbatches) / graph.batch_size();
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

absl::StatusOr<PlanResult> MakePlan(const Graph& graph, const Cluster& cluster,
                                    const PlanOptions& options) {
  PIPEPLAN_RETURN_IF_ERROR(ValidateOptions(graph, cluster, options));
  const absl::Time start = absl::Now();
  const double limit =
      options.time_limit_seconds > 0 ? options.time_limit_seconds : kDefaultTimeLimitSeconds;
  const CandidateSolver solver{
      .graph = graph,
      .cluster = cluster,
      .options = options,
      .deadline = std::min(options.deadline, start + absl::Seconds(limit)),
      .gap = options.relative_gap > 0 ? options.relative_gap : kDefaultRelativeGap};
  const bool fixed = options.schedule && options.num_ranks > 0 && options.microbatches > 0;
  // With everything fixed there is one candidate, solved by the requested
  // method directly; otherwise the search scores candidates with the fast
  // chain DP and re-solves the winner with the requested method.
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<Scored> scored,
                            ScoreCandidates(solver, Candidates(graph, cluster, options),
                                            fixed ? options.method : PartitionMethod::kDp));
  SortByThroughput(graph, options, scored);
  PlanResult best = std::move(scored.front().plan);
  if (!fixed && options.method != PartitionMethod::kDp) {
    Refine(solver, scored.front().candidate, best);
  }
  for (size_t i = 1; i < scored.size() && best.alternatives.size() < kMaxAlternatives; ++i) {
    const PlanResult& alt = scored[i].plan;
    best.alternatives.push_back({.schedule = alt.schedule,
                                 .microbatches = alt.microbatches,
                                 .num_ranks = alt.num_ranks,
                                 .step_seconds = alt.step_seconds,
                                 .peak_memory_bytes = *std::max_element(
                                     alt.stage_peak_memory.begin(), alt.stage_peak_memory.end()),
                                 .bubble_ratio = alt.bubble_ratio});
  }
  best.solve_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return best;
}

}  // namespace pipeplan
