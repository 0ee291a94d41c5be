// The replicas' gradient all-reduce in the as-run step: a plan with
// replicas ends each step with its ranks' bucketed all-reduce (the search's
// model), in SimulateAsRun and in every sampled step of SimulateSpread, on
// a shared CPU pool as CPU work, and a measured exposed all-reduce
// calibrates its ring time.
#include <optional>
#include <string>
#include <vector>

#include "chain_model.h"
#include "gtest/gtest.h"
#include "pipeplan/core/allreduce.h"
#include "pipeplan/core/cpu_pools.h"
#include "pipeplan/core/plan_costs.h"
#include "pipeplan/core/runtime_model.h"
#include "pipeplan/core/step_spread.h"

namespace pipeplan {
namespace {

constexpr double kBandwidth = 1e8;  // bytes/s between every pair: a slow ring
constexpr double kLatency = 1e-4;
constexpr double kParamBytes = 4e6;  // per node

// A chain of 4 nodes with parameters on 4 devices of one host.
ChainModel MakeModel() {
  return ChainOnOneHost(4, 1e10, kParamBytes,
                        {.intra_host_bandwidth = kBandwidth, .intra_host_latency = kLatency}, 4);
}

// 2 ranks (d0, d1) x 2 replicas (d2, d3); `replicas` false: replica 0 alone.
FixedPlan TwoByTwo(bool replicas, double bucket_bytes = 0) {
  FixedPlan p{.node_stage = {0, 0, 1, 1}, .stage_device = {0, 1}, .ranks = 2, .microbatches = 4};
  if (replicas) p.replica_groups = {{0, 2}, {1, 3}};
  p.allreduce_bucket_bytes = bucket_bytes;
  return p;
}

// One rank's gradients (2 nodes) in one bucket over a ring of two:
// 2 (d - 1) x (bytes / d / bandwidth + latency).
double OneBucketRing(const Graph& graph) {
  const double bytes = 2 * kParamBytes * TrainingMemoryOf(PlanOptions{}, graph).gradient_scale;
  return 2 * (bytes / 2 / kBandwidth + kLatency);
}

TEST(AllReduceAsRun, EndsTheStepWithTheLastRanksExposedRing) {
  const ChainModel m = MakeModel();
  absl::StatusOr<AsRunResult> alone = SimulateAsRun(m.graph, m.cluster, TwoByTwo(false));
  absl::StatusOr<AsRunResult> dp = SimulateAsRun(m.graph, m.cluster, TwoByTwo(true));
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_TRUE(dp.ok()) << dp.status();
  // One bucket (the default is 25 MiB) starts when the backward ends: all of
  // it is exposed. Rank 0 ends last (its backward is the step's last).
  const double ring = OneBucketRing(m.graph);
  ASSERT_GT(ring, 0.01);
  EXPECT_NEAR(dp->simulation.step_seconds, alone->simulation.step_seconds + ring, 1e-9);
}

TEST(AllReduceAsRun, SmallBucketsHideTheRingBehindTheBackward) {
  const ChainModel m = MakeModel();
  absl::StatusOr<AsRunResult> one = SimulateAsRun(m.graph, m.cluster, TwoByTwo(true));
  absl::StatusOr<AsRunResult> many = SimulateAsRun(m.graph, m.cluster, TwoByTwo(true, 1e5));
  absl::StatusOr<AsRunResult> alone = SimulateAsRun(m.graph, m.cluster, TwoByTwo(false));
  ASSERT_TRUE(one.ok() && many.ok() && alone.ok());
  EXPECT_LT(many->simulation.step_seconds, one->simulation.step_seconds);
  EXPECT_GT(many->simulation.step_seconds, alone->simulation.step_seconds);
}

// On CPU workers the ring's copies and sums are CPU work: small buckets hide
// it behind the last backward only where the pool has CPUs to spare. Four
// single-threaded workers on eight CPUs hide as much as workers with
// processors of their own; on four (each computing worker holds one) every
// bucket comes after the backward.
TEST(AllReduceAsRun, ASaturatedCpuPoolCannotHideTheRing) {
  const ChainModel m = MakeModel();
  auto exposed = [&](double cpus) {
    CpuPools pools;
    pools.pools = {{"m:0-3", cpus}};
    for (int d = 0; d < 4 && cpus > 0; ++d) {
      pools.device_pool["d" + std::to_string(d)] = 0;
      pools.device_threads["d" + std::to_string(d)] = 1;
    }
    absl::StatusOr<AsRunCosts> in =
        BuildAsRunCosts(m.graph, m.cluster, TwoByTwo(true, 1e5), {.cpu_pools = &pools});
    EXPECT_TRUE(in.ok()) << in.status();
    absl::StatusOr<schedule::SimulationResult> sim = in->Simulate(in->costs);
    EXPECT_TRUE(sim.ok()) << sim.status();
    return in->allreduce.Exposed(in->costs, *sim)[0];
  };
  const double own = exposed(0);  // no pool
  EXPECT_NEAR(exposed(8), own, 1e-12);
  EXPECT_GT(exposed(4), own + 0.5 * OneBucketRing(m.graph));
}

// Four single-threaded workers (2 ranks x 2 replicas) on two CPUs: rank 1
// ends first, and its ring's copies and sums take CPUs from rank 0's
// replicas, still in their last backward. Both take longer than alone: the
// ring than its time alone, the backward than without the ring. A scale
// fitted on these stretched figures is 1 (the fit compares like with like).
TEST(AllReduceAsRun, OnASaturatedPoolTheRingAndTheLastBackwardSlowEachOther) {
  const ChainModel m = MakeModel();
  CpuPools pools;
  pools.pools = {{"m:0-1", 2}};
  for (int d = 0; d < 4; ++d) {
    pools.device_pool["d" + std::to_string(d)] = 0;
    pools.device_threads["d" + std::to_string(d)] = 1;
  }
  absl::StatusOr<AsRunCosts> in =
      BuildAsRunCosts(m.graph, m.cluster, TwoByTwo(true), {.cpu_pools = &pools});
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<schedule::SimulationResult> compute = in->Simulate(in->costs);
  absl::StatusOr<schedule::SimulationResult> step = in->SimulateWithAllReduce(in->costs);
  ASSERT_TRUE(compute.ok() && step.ok());
  ASSERT_LT(compute->finish_seconds[1], compute->finish_seconds[0]);
  const std::vector<double> alone = in->allreduce.Exposed(in->costs, *compute);
  const std::vector<double> exposed = ExposedAllReduce(*step);
  ASSERT_EQ(exposed.size(), 2u);
  EXPECT_GT(exposed[1], alone[1] * 1.1);
  EXPECT_GT(step->finish_seconds[0], compute->finish_seconds[0] + 0.1 * alone[1]);
  EXPECT_GE(step->step_seconds, compute->finish_seconds[0] + alone[0]);
  absl::StatusOr<double> scale =
      FitAllReduceScale(m.graph, m.cluster, TwoByTwo(true), {.cpu_pools = &pools}, exposed);
  ASSERT_TRUE(scale.ok()) << scale.status();
  EXPECT_NEAR(*scale, 1.0, 1e-9);
}

TEST(AllReduceAsRun, EverySampledStepPaysIt) {
  const ChainModel m = MakeModel();
  absl::StatusOr<StepQuantiles> alone =
      SimulateSpread(m.graph, m.cluster, TwoByTwo(false), {}, UniformSpread(0.1));
  absl::StatusOr<StepQuantiles> dp =
      SimulateSpread(m.graph, m.cluster, TwoByTwo(true), {}, UniformSpread(0.1));
  ASSERT_TRUE(alone.ok() && dp.ok());
  const double ring = OneBucketRing(m.graph);
  EXPECT_NEAR(dp->mean_duration_seconds - alone->mean_duration_seconds, ring, 1e-9);
  EXPECT_GT(dp->p50_seconds, alone->p50_seconds + 0.9 * ring);
  EXPECT_GT(dp->p90_seconds, alone->p90_seconds + 0.9 * ring);
}

// Every device always at `ratio_0` (replica 0: d0, d1) or `ratio_1` (the
// other replica: d2, d3) of its mean, forward and backward.
ActionSpread FixedRatios(double ratio_0, double ratio_1) {
  ActionSpread spread;
  for (int d = 0; d < 4; ++d) {
    const double r = d < 2 ? ratio_0 : ratio_1;
    spread.ratios["d" + std::to_string(d)] = {{r}, {r}, {}, {}};
  }
  spread.pooled[0] = spread.pooled[1] = {1.0};
  return spread;
}

TEST(AllReduceAsRun, ASampledStepWaitsForTheSlowestReplica) {
  const ChainModel m = MakeModel();
  absl::StatusOr<StepQuantiles> even =
      SimulateSpread(m.graph, m.cluster, TwoByTwo(true), {}, FixedRatios(1, 1));
  absl::StatusOr<StepQuantiles> slow_other =
      SimulateSpread(m.graph, m.cluster, TwoByTwo(true), {}, FixedRatios(1, 2));
  absl::StatusOr<StepQuantiles> both_slow =
      SimulateSpread(m.graph, m.cluster, TwoByTwo(true), {}, FixedRatios(2, 2));
  ASSERT_TRUE(even.ok() && slow_other.ok() && both_slow.ok());
  EXPECT_NEAR(even->mean_seconds, even->mean_duration_seconds, 1e-9);
  EXPECT_EQ(even->replica_wait_seconds, 0);
  // Replica 0 ran at its means; the step still lasted as long as the other
  // replica's, twice as slow: the all-reduce waits for it.
  EXPECT_NEAR(slow_other->mean_seconds, both_slow->mean_seconds, 1e-9);
  EXPECT_NEAR(slow_other->replica_wait_seconds, both_slow->mean_seconds - even->mean_seconds, 1e-9);
  EXPECT_GT(slow_other->replica_wait_seconds, 0.01);
  EXPECT_NEAR(slow_other->mean_duration_seconds, even->mean_duration_seconds, 1e-12);
  // Without replicas nobody is waited for.
  absl::StatusOr<StepQuantiles> alone =
      SimulateSpread(m.graph, m.cluster, TwoByTwo(false), {}, FixedRatios(1, 2));
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->replica_wait_seconds, 0);
}

TEST(AllReduceAsRun, MeasuredExposedSecondsScaleTheRing) {
  const ChainModel m = MakeModel();
  const double ring = OneBucketRing(m.graph);
  // Measured 3x the modelled ring on both ranks (e.g. Gloo's host time).
  absl::StatusOr<double> scale =
      FitAllReduceScale(m.graph, m.cluster, TwoByTwo(true), {}, {3 * ring, 3 * ring});
  ASSERT_TRUE(scale.ok()) << scale.status();
  EXPECT_NEAR(*scale, 3.0, 1e-6);
  absl::StatusOr<AsRunResult> alone = SimulateAsRun(m.graph, m.cluster, TwoByTwo(false));
  const StageTimeFit fit{.allreduce_ring_scale = *scale};  // not fitted: compute as modelled
  absl::StatusOr<AsRunResult> dp =
      SimulateAsRun(m.graph, m.cluster, TwoByTwo(true), {.stage_fit = &fit});
  ASSERT_TRUE(alone.ok() && dp.ok());
  EXPECT_NEAR(dp->simulation.step_seconds - alone->simulation.step_seconds, 3 * ring, 1e-9);
  // Nothing measured, or no replicas: no scale.
  EXPECT_DOUBLE_EQ(*FitAllReduceScale(m.graph, m.cluster, TwoByTwo(true), {}, {0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(*FitAllReduceScale(m.graph, m.cluster, TwoByTwo(false), {}, {1, 1}), 1.0);
}

// A plan without replicas never runs the ring; the workers' probe prices
// its links. Probes as long as a ring through the four ranks takes at a
// third of the cluster's bandwidth give that bandwidth;
// on a pool of one CPU where all four probe at once (each keeping
// kRingCpuLoad of a CPU busy), twice that measured is the same alone. A replicated plan then pays
// its ring at it. No probe, no bandwidth.
TEST(AllReduceAsRun, TheProbePricesTheRingBeforeOneRan) {
  const ChainModel m = MakeModel();
  const FixedPlan four{
      .node_stage = {0, 1, 2, 3}, .stage_device = {0, 1, 2, 3}, .ranks = 4, .microbatches = 4};
  constexpr double kProbeBytes = 4 << 20;
  constexpr double kMeasured = kBandwidth / 3;
  const double probe = 2 * 3 * kProbeBytes / 4 / kMeasured;  // chunks of a MB: no latency
  auto probes = [&](double seconds) {
    std::vector<StepSample> out;
    for (int r = 0; r < 4; ++r) {
      out.push_back({.worker_id = "w" + std::to_string(r),
                     .rank = r,
                     .allreduce_probe_seconds = seconds,
                     .allreduce_probe_bytes = kProbeBytes});
    }
    return out;
  };
  absl::StatusOr<std::optional<double>> bw =
      FitRingBandwidthFromProbes(m.graph, m.cluster, four, {}, probes(probe));
  ASSERT_TRUE(bw.ok()) << bw.status();
  ASSERT_TRUE(bw->has_value());
  EXPECT_NEAR(**bw, kMeasured, 1e-6 * kMeasured);
  CpuPools pools;
  pools.pools = {{"m:0", 1}};
  for (int d = 0; d < 4; ++d) {
    pools.device_pool["d" + std::to_string(d)] = 0;
    pools.device_threads["d" + std::to_string(d)] = 1;
  }
  absl::StatusOr<std::optional<double>> shared = FitRingBandwidthFromProbes(
      m.graph, m.cluster, four, {.cpu_pools = &pools}, probes(2 * probe));
  ASSERT_TRUE(shared.ok() && shared->has_value());
  EXPECT_NEAR(**shared, kMeasured, 1e-6 * kMeasured);
  const StageTimeFit fit{.allreduce_ring_bandwidth = **bw};
  absl::StatusOr<AsRunResult> alone = SimulateAsRun(m.graph, m.cluster, TwoByTwo(false));
  absl::StatusOr<AsRunResult> dp =
      SimulateAsRun(m.graph, m.cluster, TwoByTwo(true), {.stage_fit = &fit});
  ASSERT_TRUE(alone.ok() && dp.ok());
  const double bytes = 2 * kParamBytes * TrainingMemoryOf(PlanOptions{}, m.graph).gradient_scale;
  EXPECT_NEAR(dp->simulation.step_seconds - alone->simulation.step_seconds,
              2 * (bytes / 2 / kMeasured + kLatency), 1e-9);
  absl::StatusOr<std::optional<double>> none =
      FitRingBandwidthFromProbes(m.graph, m.cluster, four, {}, probes(-1));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

// With a global batch, each replica's microbatch holds its share of it.
TEST(AllReduceAsRun, ReplicasSplitTheGlobalBatch) {
  const ChainModel m = MakeModel();
  FixedPlan alone = TwoByTwo(false), dp = TwoByTwo(true);
  alone.global_batch = dp.global_batch = 16;
  absl::StatusOr<AsRunCosts> a = BuildAsRunCosts(m.graph, m.cluster, alone);
  absl::StatusOr<AsRunCosts> b = BuildAsRunCosts(m.graph, m.cluster, dp);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(b->costs.forward[0] / a->costs.forward[0], 0.5, 1e-9);
}

}  // namespace
}  // namespace pipeplan
