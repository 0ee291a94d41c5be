// Spread, not only means: each action kind's measured spread per device, and
// the step quantiles a plan has under it (seeded, so deterministic).
#include "pipeplan/core/step_spread.h"

#include <string>
#include <vector>

#include "chain_model.h"
#include "gtest/gtest.h"
#include "pipeplan/core/runtime_model.h"

namespace pipeplan {
namespace {

// A chain of 8 equal nodes on 4 devices at 1 TFLOP/s.
ChainModel MakeModel() { return ChainOnOneHost(8, 1e9); }

FixedPlan FourStages() {
  return {.node_stage = {0, 0, 1, 1, 2, 2, 3, 3},
          .stage_device = {0, 1, 2, 3},
          .ranks = 4,
          .microbatches = 8};
}

// FourStages sampled twice under `spread` with the same options: the
// figures must be the same (seeded). Returns them, or the first error.
absl::StatusOr<StepQuantiles> SampledTwiceAlike(const ChainModel& m, const ActionSpread& spread,
                                                const SpreadOptions& options) {
  absl::StatusOr<StepQuantiles> a =
      SimulateSpread(m.graph, m.cluster, FourStages(), {}, spread, options);
  absl::StatusOr<StepQuantiles> b =
      SimulateSpread(m.graph, m.cluster, FourStages(), {}, spread, options);
  if (a.ok() && b.ok()) {
    EXPECT_EQ(a->p90_seconds, b->p90_seconds);
    EXPECT_EQ(a->mean_seconds, b->mean_seconds);
  }
  return a.ok() ? b : a;
}

// Reports of device `device` whose F and B take base x the step's factor.
std::vector<StepSample> Reports(const std::string& device, const std::vector<double>& factors) {
  std::vector<StepSample> out;
  for (size_t step = 0; step < factors.size(); ++step) {
    StepSample s{
        .worker_id = "w-" + device, .device_id = device, .step = static_cast<int64_t>(step)};
    for (int mb = 0; mb < 4; ++mb) {
      s.timings.push_back({.action = "0F" + std::to_string(mb), .seconds = 0.01 * factors[step]});
      s.timings.push_back({.action = "0B" + std::to_string(mb), .seconds = 0.02 * factors[step]});
      s.timings.push_back({.action = "0SEND_F" + std::to_string(mb), .seconds = 5.0});
    }
    out.push_back(s);
  }
  return out;
}

TEST(StepSpread, KeepsEachKindsRatiosToTheMedianPerDevice) {
  std::vector<StepSample> samples = Reports("d0", {9, 1.0, 1.1, 0.9, 1.0, 1.2});
  const std::vector<StepSample> other = Reports("d1", {1, 1, 1, 1, 1, 1});
  samples.insert(samples.end(), other.begin(), other.end());
  absl::StatusOr<ActionSpread> spread = MeasureActionSpread(samples, /*warmup_steps=*/1);
  ASSERT_TRUE(spread.ok()) << spread.status();
  // The warm-up step (9x) is left out; SEND is not a compute kind.
  const std::vector<double>& f = spread->ratios.at("d0")[0];
  ASSERT_EQ(f.size(), 5u);
  EXPECT_NEAR(f[1], 1.1, 1e-9);
  EXPECT_NEAR(f[4], 1.2, 1e-9);
  EXPECT_EQ(spread->ratios.at("d1")[1], std::vector<double>(5, 1.0));
  EXPECT_EQ(spread->pooled[0].size(), 10u);
  EXPECT_TRUE(spread->pooled[3].empty());
  EXPECT_GT(spread->NoiseRatio(), 0.0);
}

TEST(StepSpread, NoSpreadGivesTheDeterministicStep) {
  const ChainModel m = MakeModel();
  absl::StatusOr<StepQuantiles> q =
      SimulateSpread(m.graph, m.cluster, FourStages(), {}, ActionSpread{});
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<AsRunResult> det = SimulateAsRun(m.graph, m.cluster, FourStages());
  ASSERT_TRUE(det.ok());
  EXPECT_DOUBLE_EQ(q->p50_seconds, det->simulation.step_seconds);
  EXPECT_DOUBLE_EQ(q->p90_seconds, det->simulation.step_seconds);
  EXPECT_DOUBLE_EQ(q->mean_duration_seconds, det->simulation.step_seconds);
}

// Symmetric noise makes the expected makespan longer than the makespan at
// median durations (the pipeline waits for its slowest rank), p90 above
// p50, and the same seed gives the same figures.
TEST(StepSpread, NoiseLengthensTheExpectedStepAndIsSeeded) {
  const ChainModel m = MakeModel();
  ActionSpread spread;
  for (int d = 0; d < 4; ++d) {
    spread.ratios["d" + std::to_string(d)] = {{0.8, 0.9, 1.0, 1.1, 1.2}, {0.8, 1.0, 1.2}, {}, {}};
  }
  spread.pooled[0] = {0.8, 0.9, 1.0, 1.1, 1.2};
  spread.pooled[1] = {0.8, 1.0, 1.2};
  absl::StatusOr<StepQuantiles> a = SampledTwiceAlike(m, spread, {.samples = 200, .seed = 7});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(a->mean_seconds, a->mean_duration_seconds * 1.02);
  EXPECT_GT(a->p90_seconds, a->p50_seconds);
  EXPECT_LE(a->p90_seconds, a->mean_duration_seconds * 1.2 + 1e-12);
}

// Whole-step ratios multiply each sampled step: steps 0.8-1.2x as a whole
// put the p90 at 1.2x the deterministic step even with no per-device
// spread, and the same seed gives the same figures.
TEST(StepSpread, WholeStepRatiosSpreadTheSteps) {
  const ChainModel m = MakeModel();
  ActionSpread spread;
  spread.step_ratios = {0.8, 0.9, 1.0, 1.1, 1.2};
  ASSERT_FALSE(spread.empty());
  absl::StatusOr<StepQuantiles> a = SampledTwiceAlike(m, spread, {.samples = 400, .seed = 3});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_NEAR(a->p50_seconds, a->mean_duration_seconds, 1e-9);
  EXPECT_NEAR(a->p90_seconds / a->mean_duration_seconds, 1.2, 0.05);
  EXPECT_NEAR(a->mean_seconds / a->mean_duration_seconds, 1.0, 0.02);
}

TEST(StepSpread, QuantileInterpolates) {
  EXPECT_DOUBLE_EQ(QuantileOr({}, 0.5, -1), -1);
  EXPECT_DOUBLE_EQ(QuantileOr({3, 1, 2}, 0.5, 0), 2);
  EXPECT_DOUBLE_EQ(QuantileOr({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.9, 0), 10);
}

}  // namespace
}  // namespace pipeplan
