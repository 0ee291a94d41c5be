// Calibration a new split can use: per-operator-kind cost corrections fitted
// from measured per-stage times.
//
// Device factors (calibration.h) say "device d ran 1.4x the model" for the
// stages the current plan put on d. When the cost model is off unevenly
// across the graph (an embedding lookup modelled by its flops, a loss whose
// softmax dominates), that factor belongs to the nodes, not the device, and
// a plan that cuts the model elsewhere inherits the wrong numbers. Workers
// measure per stage, the model costs per node: FitKindCorrections finds one
// factor per operator kind (NodeSpec::op) for forward and one for backward
// such that, for every measured stage, the sum over its nodes of factor x
// modelled seconds matches the measured seconds. It is a ridge-regularised
// least squares on relative errors: kinds the stages cannot tell apart stay
// near the common factor (total measured / total modelled) instead of
// taking arbitrary values. PredictStageTimes then prices any split.
//
// With KindFitOptions::fit_fixed each action also pays a fixed cost (an
// executor's call per F or B, whatever the stage holds) and a cost per node
// it runs (an op's dispatch: a view or a getitem has no flops but is not
// free), fitted with the factors: measured = fixed + per_node x nodes + sum
// of factor x modelled. The factors are
// then pulled towards the common scale of a fit of fixed + one scale, each
// by its relative departure (`ridge` x ((k - c) / c)^2): with four stages
// and twenty kinds a kind seen in one stage only must not take that
// stage's whole error.
//
// The optimizer step is fitted the same way: seconds per parameter byte of
// the stage (with a per-stage constant), from the executor's measured
// optimizer time.
//
// Pure; no I/O.
#ifndef PIPEPLAN_CORE_NODE_CORRECTIONS_H_
#define PIPEPLAN_CORE_NODE_CORRECTIONS_H_

#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/cost_model.h"

namespace pipeplan {

// One stage's measured seconds (per microbatch for F and B; per step for the
// optimizer; negative: not measured).
struct MeasuredStage {
  double forward_seconds = -1;
  double backward_seconds = -1;
  double optimizer_seconds = -1;
};

struct KindCorrections {
  // op kind -> measured / modelled seconds; a kind not listed gets the
  // common factor.
  std::map<std::string, double> forward, backward;
  double forward_common = 1, backward_common = 1;
  // Seconds every F (B) pays whatever its nodes, and per node it runs
  // (0 unless fit_fixed).
  double forward_fixed_seconds = 0, backward_fixed_seconds = 0;
  double forward_per_node_seconds = 0, backward_per_node_seconds = 0;
  // Optimizer seconds per step = fixed + per_param_byte x stage param bytes.
  double optimizer_fixed_seconds = 0;
  double optimizer_seconds_per_param_byte = 0;

  double ForwardFactor(const std::string& op) const;
  double BackwardFactor(const std::string& op) const;
};

struct KindFitOptions {
  // Weight of pulling each kind's factor towards the common factor,
  // relative to one stage's squared relative error.
  double ridge = 0.05;
  // Fit a fixed seconds per F and per B, and per node, too (unregularised).
  bool fit_fixed = false;
};

// `cost` models the graph on the cluster; `node_stage` and `stage_device`
// are the measured plan's split; `measured` has one entry per stage.
// `stage_units` (empty: 1 each) divides each stage's modelled seconds (the
// device's calibration factor when `cost` runs on a calibrated cluster and
// the factors should apply to nominal seconds). INVALID_ARGUMENT on
// mismatched sizes or no positive measurement.
absl::StatusOr<KindCorrections> FitKindCorrections(const CostModel& cost,
                                                   std::span<const int> node_stage,
                                                   std::span<const int> stage_device,
                                                   std::span<const MeasuredStage> measured,
                                                   const KindFitOptions& options = {},
                                                   std::span<const double> stage_units = {});

// Every stage's predicted seconds under the corrections, for any split
// (fixed costs included; `stage_units` as in the fit).
std::vector<MeasuredStage> PredictStageTimes(const CostModel& cost,
                                             const KindCorrections& corrections,
                                             std::span<const int> node_stage,
                                             std::span<const int> stage_device,
                                             std::span<const double> stage_units = {});

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_NODE_CORRECTIONS_H_
