// What the as-run model takes from how workers run, beyond the costs: CPU
// workers sharing a machine's cores (cpu_pools.h) and an executor whose W
// repeats the backward (stage_time_fit.h).
#include <string>
#include <vector>

#include "chain_model.h"
#include "gtest/gtest.h"
#include "pipeplan/core/cpu_pools.h"
#include "pipeplan/core/runtime_model.h"
#include "pipeplan/core/stage_time_fit.h"

namespace pipeplan {
namespace {

ChainModel MakeModel() { return ChainOnOneHost(4, 1e10, 0, {}, 4); }

CpuPools OnePool(double cpus) {
  CpuPools p;
  p.pools = {{"m:0-1", cpus}};
  for (int d = 0; d < 4; ++d) {
    p.device_pool["d" + std::to_string(d)] = 0;
    p.device_threads["d" + std::to_string(d)] = 1;
  }
  return p;
}

TEST(AsRunSharing, ReplicasOnThePoolLoadItAndSlowTheStep) {
  const ChainModel m = MakeModel();
  FixedPlan plan{.node_stage = {0, 0, 1, 1}, .stage_device = {0, 1}, .ranks = 2, .microbatches = 8};
  plan.replica_groups = {{0, 2}, {1, 3}};
  const CpuPools two = OnePool(2);
  absl::StatusOr<AsRunCosts> shared =
      BuildAsRunCosts(m.graph, m.cluster, plan, {.cpu_pools = &two});
  ASSERT_TRUE(shared.ok()) << shared.status();
  // Each rank stands for itself and its replica on the same two CPUs.
  EXPECT_EQ(shared->sharing.rank_load, (std::vector<double>{2, 2}));
  absl::StatusOr<AsRunResult> alone = SimulateAsRun(m.graph, m.cluster, plan);
  absl::StatusOr<AsRunResult> slowed = SimulateAsRun(m.graph, m.cluster, plan, {.cpu_pools = &two});
  ASSERT_TRUE(alone.ok() && slowed.ok());
  EXPECT_GT(slowed->simulation.step_seconds, 1.5 * alone->simulation.step_seconds);
  // Four CPUs hold all four workers: no slowdown.
  const CpuPools four = OnePool(4);
  absl::StatusOr<AsRunResult> roomy = SimulateAsRun(m.graph, m.cluster, plan, {.cpu_pools = &four});
  ASSERT_TRUE(roomy.ok());
  EXPECT_NEAR(roomy->simulation.step_seconds, alone->simulation.step_seconds, 1e-12);
}

// The torch executor's W (weight_pass_repeats_backward) runs the whole
// backward again, and its first stage's I differentiates nothing: measured
// on the GPT's ZB-H1, 0.1 ms against a 55 ms W; priced as an I on top, the
// first stage's backward came out 32% over its time alone.
TEST(AsRunSharing, AWeightPassThatRepeatsTheBackwardCostsAFullBackward) {
  const ChainModel m = MakeModel();
  FixedPlan zb{.node_stage = {0, 1, 2, 3},
               .stage_device = {0, 1, 2, 3},
               .schedule = schedule::ScheduleKind::kInterleavedZeroBubble,
               .ranks = 4,
               .microbatches = 8};
  StageTimeFit fit;  // not fitted: the cost model's times
  absl::StatusOr<AsRunCosts> plain = BuildAsRunCosts(m.graph, m.cluster, zb, {.stage_fit = &fit});
  fit.weight_pass_repeats_backward = true;
  absl::StatusOr<AsRunCosts> repeats = BuildAsRunCosts(m.graph, m.cluster, zb, {.stage_fit = &fit});
  ASSERT_TRUE(plain.ok() && repeats.ok()) << plain.status() << repeats.status();
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_DOUBLE_EQ(repeats->costs.backward_weight[s],
                     plain->costs.backward_input[s] + plain->costs.backward_weight[s]);
  }
  // The first stage has no input gradient to compute: its I is free, the
  // others' I comes on top of their W.
  ASSERT_GT(plain->costs.backward_input[0], 0);
  EXPECT_EQ(repeats->costs.backward_input[0], 0);
  for (size_t s = 1; s < 4; ++s) {
    EXPECT_DOUBLE_EQ(repeats->costs.backward_input[s], plain->costs.backward_input[s]);
  }
  // A fused B is what it was.
  FixedPlan one_f1b = zb;
  one_f1b.schedule = schedule::ScheduleKind::k1F1B;
  absl::StatusOr<AsRunCosts> fused =
      BuildAsRunCosts(m.graph, m.cluster, one_f1b, {.stage_fit = &fit});
  ASSERT_TRUE(fused.ok());
  EXPECT_DOUBLE_EQ(fused->costs.backward_weight[0], plain->costs.backward_weight[0]);
}

}  // namespace
}  // namespace pipeplan
