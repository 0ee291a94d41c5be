#include "split.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/solve_partition.h"

namespace pipeplan::search {
namespace {

// Rounds of cap tightening before a split is declared not to fit.
constexpr int kMemoryRounds = 4;

const Graph& SplitGraph(const SplitInputs& in) {
  return in.groups != nullptr ? *in.groups->graph : *in.graph;
}

// The partitioners' view of one attempt: in-flight counts (one microbatch of
// activations when recomputing) and caps less what they do not see.
PartitionProblem ViewProblem(const SplitInputs& in, const CostModel& view, bool recompute,
                             const std::vector<double>& reserve) {
  const absl::Time deadline = in.solve_limit == absl::InfiniteDuration()
                                  ? in.deadline
                                  : std::min(in.hard_deadline, absl::Now() + in.solve_limit);
  PartitionProblem p{.cost = &view,
                     .stage_device = in.stage_device,
                     .deadline = deadline,
                     .relative_gap = in.relative_gap,
                     .warm_start = in.warm_start,
                     .cancelled = in.cancelled,
                     .log = in.log};
  for (size_t s = 0; s < in.stage_device.size(); ++s) {
    p.stage_inflight.push_back(recompute ? 1 : in.stage_inflight[s]);
    p.stage_memory_cap.push_back(std::max(0.0, in.stage_cap[s] - reserve[s]));
  }
  return p;
}

// The exact stages of a split, recomputing where (and only where) memory
// needs it; false in `fits` with the shortfall added to `reserve` when a
// stage is still over its cap.
std::vector<StageCost> ExactStages(const SplitInputs& in, std::vector<StageCost> stages,
                                   bool recompute, Split& out, std::vector<double>& reserve,
                                   bool& fits) {
  const int k = static_cast<int>(stages.size());
  out.recompute.assign(k, 0);
  out.stage_memory.assign(k, 0);
  fits = true;
  for (int s = 0; s < k; ++s) {
    const int inflight = in.stage_inflight[s];
    if (recompute && stages[s].peak_memory_bytes(inflight) > in.stage_cap[s]) {
      ApplyRecompute(stages[s]);
      out.recompute[s] = 1;
    }
    const double peak = stages[s].peak_memory_bytes(inflight);
    out.stage_memory[s] = peak;
    if (peak > in.stage_cap[s] * (1 + 1e-9)) {
      fits = false;
      reserve[s] += (peak - in.stage_cap[s]) * 1.01 + 1;
    }
  }
  return stages;
}

absl::StatusOr<Split> Attempt(const SplitInputs& in, PartitionMethod method, bool recompute) {
  CostOptions view_options = in.cost_options;
  view_options.recompute = recompute;
  const CostModel view(SplitGraph(in), *in.pipeline, view_options);
  const CostModel exact(*in.graph, *in.pipeline, in.cost_options);
  const int k = static_cast<int>(in.stage_device.size());
  std::vector<double> reserve(k, 0);
  // The loss sits on the last stage; its transient buffer is not in the
  // partitioners' memory rows.
  for (int v = 0; v < in.graph->num_nodes(); ++v) reserve[k - 1] += exact.transient_bytes(v);
  double first_bound = -1;
  for (int round = 0; round < kMemoryRounds; ++round) {
    PIPEPLAN_ASSIGN_OR_RETURN(PlanResult solved,
                              SolvePartition(ViewProblem(in, view, recompute, reserve), method));
    // A bound under tightened caps need not hold under the real ones.
    if (first_bound < 0) first_bound = solved.lower_bound;
    std::vector<int> stage_of_node = in.groups != nullptr
                                         ? in.groups->Expand(solved.partition.stage_of_node)
                                         : solved.partition.stage_of_node;
    PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StageCost> stages,
                              exact.Evaluate(stage_of_node, in.stage_device));
    Split out;
    bool fits = false;
    stages = ExactStages(in, std::move(stages), recompute, out, reserve, fits);
    if (fits) {
      Partition& part = solved.partition;
      part.stage_of_node = std::move(stage_of_node);
      part.stages = std::move(stages);
      part.objective = BottleneckSeconds(part.stages);
      part.fits_memory = true;
      // Recomputation only adds work; a bound proven with it on every stage
      // does not hold for a split that recomputes fewer.
      double bound = std::min(first_bound, part.objective);
      if (recompute || in.graph->has_outputs_without_grad()) {
        const PartitionProblem plain{
            .cost = &exact, .stage_device = in.stage_device, .stage_inflight = in.stage_inflight};
        bound = std::min(bound, BalanceLowerBound(plain));
      }
      solved.lower_bound = part.lower_bound = bound;
      solved.gap =
          part.objective > 0 ? std::max(0.0, (part.objective - bound) / part.objective) : 0;
      out.solve = std::move(solved);
      return out;
    }
    const bool fresh = in.solve_limit != absl::InfiniteDuration();
    if ((fresh ? in.hard_deadline : in.deadline) <= absl::Now()) break;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no split into ", k, " stages fits in memory", recompute ? " recomputing" : ""));
}

}  // namespace

absl::StatusOr<Split> SolveSplit(const SplitInputs& inputs, PartitionMethod method,
                                 double* needed_scale) {
  absl::StatusOr<Split> plain = Attempt(inputs, method, /*recompute=*/false);
  if (plain.ok() || plain.status().code() != absl::StatusCode::kFailedPrecondition) return plain;
  absl::StatusOr<Split> recomputed = Attempt(inputs, method, /*recompute=*/true);
  if (recomputed.ok() || recomputed.status().code() != absl::StatusCode::kFailedPrecondition) {
    return recomputed;
  }
  if (needed_scale != nullptr) {
    CostOptions view_options = inputs.cost_options;
    view_options.recompute = true;
    const CostModel view(SplitGraph(inputs), *inputs.pipeline, view_options);
    const std::vector<double> none(inputs.stage_device.size(), 0);
    *needed_scale = MemoryScaleNeeded(ViewProblem(inputs, view, true, none));
  }
  return recomputed;
}

namespace {

// Everything SolveSplit's answer depends on, but the deadlines and the
// chain DP's warm start: the graphs,
// the cost options, the pipeline's devices and links, the stages.
std::vector<double> SplitKey(const SplitInputs& in, PartitionMethod method) {
  static_assert(sizeof(CostOptions) == 40, "a new CostOptions field must join SplitKey");
  const CostOptions& co = in.cost_options;
  std::vector<double> key = {static_cast<double>(reinterpret_cast<uintptr_t>(in.graph)),
                             static_cast<double>(reinterpret_cast<uintptr_t>(in.groups)),
                             static_cast<double>(method),
                             in.relative_gap,
                             static_cast<double>(co.comm_model),
                             co.optimizer_state_multiplier,
                             co.sample_scale,
                             co.tensor_scale,
                             static_cast<double>(co.recompute),
                             static_cast<double>(co.loss_workspace),
                             in.pipeline->max_flops()};
  const int p = in.pipeline->num_devices();
  for (int a = 0; a < p; ++a) {
    key.push_back(in.pipeline->device(a).flops);
    key.push_back(in.pipeline->device(a).memory_bytes);
    for (int b = 0; b < p; ++b) {
      key.push_back(in.pipeline->bandwidth(a, b));
      key.push_back(in.pipeline->latency(a, b));
    }
  }
  for (size_t s = 0; s < in.stage_device.size(); ++s) {
    key.push_back(in.stage_device[s]);
    key.push_back(in.stage_inflight[s]);
    key.push_back(in.stage_cap[s]);
  }
  return key;
}

}  // namespace

absl::StatusOr<Split> SplitCache::Solve(const SplitInputs& inputs, PartitionMethod method,
                                        double* needed_scale) {
  // The chain DP's answer does not depend on its warm start (only how
  // fast it finds it); other methods' may.
  const bool warm_matters = !inputs.warm_start.empty() && method != PartitionMethod::kDp;
  if (warm_matters || inputs.log) return SolveSplit(inputs, method, needed_scale);
  std::vector<double> key = SplitKey(inputs, method);
  if (auto it = answers_.find(key); it != answers_.end()) {
    if (needed_scale != nullptr) *needed_scale = it->second.needed_scale;
    return it->second.split;
  }
  double scale = std::numeric_limits<double>::infinity();
  absl::StatusOr<Split> split = SolveSplit(inputs, method, &scale);
  if (needed_scale != nullptr) *needed_scale = scale;
  if (split.ok() || split.status().code() == absl::StatusCode::kFailedPrecondition) {
    answers_.emplace(std::move(key), Answer{split, scale});
  }
  return split;
}

}  // namespace pipeplan::search
