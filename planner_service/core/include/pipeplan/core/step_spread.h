// Spread, not only means: how much each action kind's duration varies from
// step to step on each device, and the step time quantiles a plan has under
// that spread.
//
// The simulator is deterministic: given mean durations it returns one
// makespan. Real steps vary, and because a pipeline waits for its slowest
// rank at every dependency, the makespan under random durations is longer
// than the makespan at mean durations (a max of noisy terms). A replan that
// compares two plans at their means can pick one that is faster on paper and
// slower on average, and a predicted step without a spread cannot say
// whether a measured one is surprising.
//
// MeasureActionSpread keeps, per device and action kind (F, B, I, W), the
// ratios of each step's mean duration of that kind to the device's median
// over the window: a unitless spread that carries to a plan that puts other
// stages on the device. SimulateSpread draws, per sampled step, one ratio per
// device and kind (a device slowed by the machine's load is slow for the
// whole step, so draws are per step, not per action), scales the plan's
// as-run stage costs by them and simulates, then multiplies the step by one
// whole-step ratio (ActionSpread::step_ratios, where the calibration has
// them: the machine slows every rank of a step at once); from the makespans
// it reports the mean (the expected step time, what candidates are compared
// by) and the p50 and p90. Draws come from a seeded generator: the same seed gives the
// same figures.
//
// Data-parallel replicas meet at every step's gradient all-reduce, so a step
// ends with its slowest replica: the expected step exceeds one replica's by
// the expected maximum of their independent slowdowns. Each sampled step
// simulates every replica (the first 16) with its own devices' draws and
// ends at the latest (the whole-step ratio, common to all, after). On the
// bench's four CPU workers (2 ranks x 2 replicas of a small GPT, two cores)
// replicas that started a step within 4 ms finished their backward up to
// 150 ms apart on a 500 ms step, either one first (docs/observability.md).
//
// Plain structs; reentrant; no I/O.
#ifndef PIPEPLAN_CORE_STEP_SPREAD_H_
#define PIPEPLAN_CORE_STEP_SPREAD_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/runtime_model.h"

namespace pipeplan {

// Action kinds whose spread is kept.
enum class SpreadKind { kForward = 0, kBackward = 1, kBackwardInput = 2, kBackwardWeight = 3 };
inline constexpr int kNumSpreadKinds = 4;

struct ActionSpread {
  // device id -> per kind, one ratio per counted step (median about 1).
  std::map<std::string, std::vector<std::vector<double>>> ratios;
  // The ratios of a kind over every device: what a device without its own
  // draws from.
  std::vector<std::vector<double>> pooled = std::vector<std::vector<double>>(kNumSpreadKinds);
  // Whole steps' ratios (median about 1): what slows every rank of a step
  // at once (the machine's load, a worker's CPU share), which per-device
  // draws do not carry. Each sampled step's time is multiplied by one draw;
  // empty: none.
  std::vector<double> step_ratios;

  bool empty() const;
  // (p90 - p50) / p50 of the pooled forward and backward ratios: one number
  // for "how noisy is this machine".
  double NoiseRatio() const;
};

// `samples` are reports of one plan version; each worker's first
// `warmup_steps` steps are skipped (FirstCountedSteps). Actions that do not
// parse are INVALID_ARGUMENT; SEND/RECV are not counted (their spread is the
// peer's). At most `max_ratios` most recent steps per device and kind are
// kept.
absl::StatusOr<ActionSpread> MeasureActionSpread(std::span<const StepSample> samples,
                                                 int warmup_steps, int max_ratios = 256);

struct SpreadOptions {
  int samples = 64;
  uint64_t seed = 1;
};

struct StepQuantiles {
  double mean_seconds = 0;  // expected step time under the spread
  double p50_seconds = 0;
  double p90_seconds = 0;
  double mean_duration_seconds = 0;  // the deterministic step at median durations
  // With replicas: the expected time a sampled step waits past the simulated
  // replica's own end for the slowest other replica (0 without replicas).
  double replica_wait_seconds = 0;
  int samples = 0;

  // The one step to predict: at median durations, plus the wait for the
  // slowest replica (a deterministic simulation of one replica cannot have it).
  double PointSeconds() const { return mean_duration_seconds + replica_wait_seconds; }
};

// The step time of `plan` under `spread` (as SimulateAsRun under the same
// cluster and options, each sample's compute scaled by the draws). An empty
// spread gives the deterministic step for every figure. Errors: as
// SimulateAsRun; INVALID_ARGUMENT for samples < 1.
absl::StatusOr<StepQuantiles> SimulateSpread(const Graph& graph, const Cluster& cluster,
                                             const FixedPlan& plan, const AsRunOptions& as_run,
                                             const ActionSpread& spread,
                                             const SpreadOptions& options = {});

// The same sampling on a lowered schedule and its per-stage costs, the
// stages on `stage_device` (ids looked up in the spread; unknown ones draw
// from the pooled ratios). For callers without a graph (`pipeplan
// simulate`). With `allreduce`, each step ends with the replicas' gradient
// all-reduce (runtime_model.h); with `sharing`, ranks share CPU pools
// (schedule/shared_compute.h). `replicas` holds, per replica but the
// simulated one, its device per stage: each replica draws its own ratios and
// a sampled step ends with the slowest (the all-reduce waits for it).
// Errors: as Simulate; INVALID_ARGUMENT for samples < 1 or a device per
// stage missing.
absl::StatusOr<StepQuantiles> SampleSteps(
    const schedule::PipelineSchedule& lowered, const schedule::StageCosts& costs,
    const std::vector<std::string>& stage_device, const ActionSpread& spread,
    const SpreadOptions& options = {}, const AsRunAllReduce* allreduce = nullptr,
    const schedule::ComputeSharing* sharing = nullptr,
    const std::vector<std::vector<std::string>>& replicas = {});

// A spread of relative noise `r` on every action kind: ratios evenly over
// [1 - r, 1 + r] (what `pipeplan simulate --noise` asks about).
ActionSpread UniformSpread(double r);

// The q-quantile (0..1) of `values` by linear interpolation between order
// statistics; `if_empty` when there are none.
double QuantileOr(std::vector<double> values, double q, double if_empty);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_STEP_SPREAD_H_
