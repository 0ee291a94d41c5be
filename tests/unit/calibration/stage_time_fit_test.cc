// Stage times as an executor measures them: a fixed cost per action plus a
// scale of the modelled seconds, with a straggler kept as a device factor,
// and the EndStep tail.
#include "pipeplan/core/stage_time_fit.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pipeplan {
namespace {

// One report per step of a rank holding `stage`: F and B of 4 microbatches
// at `f` and `b` seconds, EndStep `end` seconds.
StepSample Report(const std::string& device, int stage, int64_t step, double f, double b,
                  double end) {
  StepSample s{.worker_id = "w" + device, .device_id = device, .step = step};
  for (int mb = 0; mb < 4; ++mb) {
    s.timings.push_back({.action = std::to_string(stage) + "F" + std::to_string(mb), .seconds = f});
    s.timings.push_back({.action = std::to_string(stage) + "B" + std::to_string(mb), .seconds = b});
  }
  s.optimizer_seconds = end;
  return s;
}

// Modelled F of the four stages (seconds, nominal): 1, 2, 3, 4 ms; B twice.
// Measured: 5 ms + 2x model per F, 8 ms + 2x model per B; device d3 runs 1.5x.
std::vector<StepSample> Samples() {
  std::vector<StepSample> out;
  for (int64_t step = 0; step < 5; ++step) {
    for (int s = 0; s < 4; ++s) {
      const double model = 1e-3 * (s + 1);
      const double slow = s == 3 ? 1.5 : 1.0;
      out.push_back(Report("d" + std::to_string(s), s, step, slow * (5e-3 + 2 * model),
                           slow * (8e-3 + 2 * 2 * model), s == 3 ? 0.01 : 0.02 + 0.001 * s));
    }
  }
  return out;
}

std::vector<PlannedStage> Planned() {
  std::vector<PlannedStage> out;
  for (int s = 0; s < 4; ++s) {
    // The plan's own factor 2 on d1: its planned seconds are twice nominal.
    const double own = s == 1 ? 2.0 : 1.0;
    out.push_back({.device_id = "d" + std::to_string(s),
                   .forward_seconds = own * 1e-3 * (s + 1),
                   .backward_seconds = own * 2e-3 * (s + 1),
                   .time_factor = own});
  }
  return out;
}

TEST(StageTimeFit, SeparatesTheFixedCostFromTheScaleAndKeepsAStraggler) {
  const std::vector<StepSample> samples = Samples();
  const std::vector<PlannedStage> planned = Planned();
  const StageTimeFit fit = FitStageTimes(samples, planned);
  ASSERT_TRUE(fit.fitted);
  // The three quiet stages lie on the lines; the straggler (d3) is 1.5x off
  // them, so the line moves somewhat, and d3 stays the slow device.
  EXPECT_GT(fit.forward_fixed, 3e-3);
  EXPECT_GT(fit.device_factor.at("d3"), 1.2);
  EXPECT_NEAR(fit.device_factor.at("d1"), 1.0, 0.15);
  // The device that arrived last at EndStep waited for nobody: 10 ms.
  EXPECT_DOUBLE_EQ(fit.end_step_seconds, 0.01);
}

// A split elsewhere (two stages, 5 and 5 ms modelled F) is priced from the
// line: fixed cost once per action, not scaled with the stage's size.
TEST(StageTimeFit, PricesAnotherSplitFromTheLine) {
  std::vector<StepSample> quiet;
  for (int64_t step = 0; step < 5; ++step) {
    for (int s = 0; s < 4; ++s) {
      const double model = 1e-3 * (s + 1);
      quiet.push_back(
          Report("d" + std::to_string(s), s, step, 5e-3 + 2 * model, 8e-3 + 4 * model, 0.01));
    }
  }
  std::vector<PlannedStage> planned = Planned();
  planned[1].forward_seconds /= 2, planned[1].backward_seconds /= 2, planned[1].time_factor = 1;
  const StageTimeFit fit = FitStageTimes(quiet, planned);
  ASSERT_TRUE(fit.fitted);
  schedule::StageCosts costs = schedule::StageCosts::Uniform(2, 5e-3, 5e-3, 5e-3);
  ApplyStageTimeFit(fit, {"d0", "d2"}, costs);
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(costs.forward[s], 5e-3 + 2 * 5e-3, 1e-9);
    EXPECT_NEAR(costs.backward_input[s] + costs.backward_weight[s], 8e-3 + 2 * 10e-3, 1e-9);
  }
  // Modelled device factors a device factor fit would have used instead:
  // the 1 ms stage measured 7 ms, 7x, which would price 5 ms at 35 ms.
  EXPECT_LT(costs.forward[0], 0.5 * 7 * 5e-3);
}

TEST(StageTimeFit, TooFewStagesIsNotAFit) {
  const std::vector<StepSample> one = {Report("d0", 0, 1, 1e-3, 2e-3, 0)};
  EXPECT_FALSE(FitStageTimes(one, Planned()).fitted);
}

// A report of an executor whose W runs the backward again (the torch
// executor): F, I and W of `microbatches` microbatches on `stage`.
StepSample SplitReport(int stage, int64_t step, int microbatches, double f, double i, double w) {
  const std::string st = std::to_string(stage);
  StepSample r{.worker_id = "w" + st,
               .device_id = "d" + st,
               .step = step,
               .weight_pass_repeats_backward = true};
  for (int mb = 0; mb < microbatches; ++mb) {
    const std::string m = std::to_string(mb);
    r.timings.push_back({.action = st + "F" + m, .seconds = f});
    r.timings.push_back({.action = st + "I" + m, .seconds = i});
    r.timings.push_back({.action = st + "W" + m, .seconds = w});
  }
  return r;
}

// `stages` stages modelled at (s + 1) ms for F and for B.
std::vector<PlannedStage> EqualParts(int stages) {
  std::vector<PlannedStage> out;
  for (int s = 0; s < stages; ++s) {
    out.push_back({.device_id = "d" + std::to_string(s),
                   .forward_seconds = 1e-3 * (s + 1),
                   .backward_seconds = 1e-3 * (s + 1)});
  }
  return out;
}

// A measured W alone is the full backward, so a ZB version calibrates the
// same line as a 1F1B one instead of one 1.5x too steep.
TEST(StageTimeFit, AWeightPassThatRepeatsTheBackwardMeasuresAFullBackward) {
  std::vector<StepSample> split;
  for (int64_t step = 0; step < 5; ++step) {
    for (int s = 0; s < 4; ++s) {
      const double b = 2e-3 * (s + 1);  // the fused backward, twice the model
      split.push_back(SplitReport(s, step, 4, 1e-3 * (s + 1), 0.5 * b, b));
    }
  }
  StageTimeFit fit = FitStageTimes(split, EqualParts(4));
  ASSERT_TRUE(fit.fitted);
  EXPECT_NEAR(fit.backward_scale, 2, 1e-9);
  for (StepSample& r : split) r.weight_pass_repeats_backward = false;
  EXPECT_NEAR(FitStageTimes(split, EqualParts(4)).backward_scale, 3, 1e-9);  // I + W
}

// A stage the executor could not split runs the full backward at I and
// nothing at W: its I is then the full backward, repeats or not.
TEST(StageTimeFit, AnUnsplitStageKeepsItsBackwardInI) {
  std::vector<StepSample> samples;
  for (int64_t step = 0; step < 3; ++step) {
    for (int s = 0; s < 2; ++s)
      samples.push_back(SplitReport(s, step, 1, 1e-3 * (s + 1), 2e-3 * (s + 1), 0));
  }
  const StageTimeFit fit = FitStageTimes(samples, EqualParts(2));
  ASSERT_TRUE(fit.fitted);
  EXPECT_NEAR(fit.backward_scale, 2, 1e-9);
}

}  // namespace
}  // namespace pipeplan
