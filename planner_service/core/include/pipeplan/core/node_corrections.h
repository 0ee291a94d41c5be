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
// With KindFitOptions::fit_fixed each action may also pay a fixed cost (an
// executor's call per F or B, whatever the stage holds), a cost per node it
// runs (an op's dispatch: a view or a getitem has no flops but is not
// free) and a cost per parameter byte of the stage (a layer whose weights
// outweigh its arithmetic: ResNet-18's layer4 on 64x64 images holds 75% of
// the weights and 23% of the flops, and on a CPU it costs by its weights). Which of the three a fit
// uses is chosen by leave-one-out: the set that best predicts each measured stage from the others
// (so a cost that only explains one stage's noise stays out; four stages cannot carry four free
// costs). The kinds' factors are then fitted with it and pulled towards the common scale, each by
// its relative departure (`ridge` x ((k - c) / c)^2): with four stages and twenty kinds a kind seen
// in one stage only must not take that stage's whole error. On a graph with measured node times
// (pipeplan_export.py --profile) only the fixed cost is a candidate: each node's dispatch and its
// weights' cost are in its measured time, and a cost per node fitted on four GPT stages took
// 0.2-0.6 ms a node from the linear layers' factor, so an interleaved plan's five-node MLP chunks
// were priced at a quarter of their measured backward (docs/observability.md).
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
  // Seconds every F (B) pays whatever its nodes, per node it runs, and per
  // parameter byte of its stage (0 unless fit_fixed chose them).
  double forward_fixed_seconds = 0, backward_fixed_seconds = 0;
  double forward_per_node_seconds = 0, backward_per_node_seconds = 0;
  double forward_seconds_per_param_byte = 0, backward_seconds_per_param_byte = 0;
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
  // Fit a fixed seconds per F and per B, per node and per parameter byte,
  // too, where they predict the stages (unregularised).
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
