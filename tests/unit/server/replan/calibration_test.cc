// EstimateDeviceFactors, CalibratedClusterSpec and SimulateFixedPlan
// (planner_service/core/calibration.h) on synthetic report sets.
#include "pipeplan/core/calibration.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "pipeplan/core/planner.h"

namespace pipeplan {
namespace {

// 4 stages, 1F1B, 4 microbatches, one stage per device gpu0..gpu3; stage s
// predicts F = 1 ms, B = 2 ms (times `plan_factor`, the plan's own
// calibration of that device).
std::vector<PlannedStage> Stages(std::map<std::string, double> plan_factor = {}) {
  std::vector<PlannedStage> out;
  for (int s = 0; s < 4; ++s) {
    const std::string d = absl::StrCat("gpu", s);
    const double f = plan_factor.contains(d) ? plan_factor[d] : 1.0;
    out.push_back({.device_id = d,
                   .forward_seconds = 1e-3 * f,
                   .backward_seconds = 2e-3 * f,
                   .time_factor = f});
  }
  return out;
}

// One report per worker and step; `truth` is each device's real time
// relative to the uncalibrated model, `noise` a relative +- jitter.
std::vector<StepSample> Reports(int steps, std::map<std::string, double> truth, double noise,
                                const std::vector<PlannedStage>& stages, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  std::vector<StepSample> out;
  for (int step = 0; step < steps; ++step) {
    for (int s = 0; s < 4; ++s) {
      const PlannedStage& st = stages[s];
      const double t = truth.contains(st.device_id) ? truth[st.device_id] : 1.0;
      StepSample r{.worker_id = absl::StrCat("w", s), .step = step, .timings = {}};
      for (int mb = 0; mb < 4; ++mb) {
        r.timings.push_back(
            {absl::StrCat(s, "F", mb), st.forward_seconds / st.time_factor * t * jitter(rng)});
        r.timings.push_back(
            {absl::StrCat(s, "B", mb), st.backward_seconds / st.time_factor * t * jitter(rng)});
        // Communication is never used: make it absurd to prove it.
        r.timings.push_back({absl::StrCat(s, "SEND_F", mb), 5.0});
        r.timings.push_back({absl::StrCat(s, "RECV_B", mb), 7.0});
      }
      out.push_back(std::move(r));
    }
  }
  return out;
}

// A second data-parallel replica runs replica 0's stages on its own
// devices: its reports, attributed to those devices, calibrate them (a slow
// replica device is found) and leave replica 0's devices alone.
TEST(Calibration, ReportsOfAReplicaCountForItsOwnDevices) {
  const auto stages = Stages();
  auto reports = Reports(6, {}, 0.02, stages);
  auto replica = Reports(6, {{"gpu1", 3.0}}, 0.02, stages, 7);
  for (StepSample& r : replica) {
    r.device_id = absl::StrCat("gpu", 4 + (r.worker_id.back() - '0'));  // gpu4..gpu7
    r.worker_id += "-replica1";
    reports.push_back(std::move(r));
  }
  auto got = EstimateDeviceFactors(reports, stages, {.warmup_steps = 0, .min_samples = 3});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->devices.size(), 8u);
  for (const DeviceFactor& f : got->devices) {
    EXPECT_EQ(f.samples, 6) << f.device_id;
    EXPECT_NEAR(f.time_factor, f.device_id == "gpu5" ? 3.0 : 1.0, 0.1) << f.device_id;
  }
}

TEST(Calibration, StragglerTwiceSlowerIsDetected) {
  const auto stages = Stages();
  auto reports = Reports(8, {{"gpu2", 2.0}}, 0.05, stages);
  // Warm-up: step 0 of every worker is 10x slow and must not count.
  for (StepSample& r : reports) {
    if (r.step == 0) {
      for (TimingSample& t : r.timings) t.seconds *= 10;
    }
  }
  auto got = EstimateDeviceFactors(reports, stages, {.warmup_steps = 1, .min_samples = 3});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->devices.size(), 4u);
  EXPECT_EQ(got->reports_used, 7 * 4);
  for (const DeviceFactor& f : got->devices) {
    EXPECT_EQ(f.samples, 7) << f.device_id;
    if (f.device_id == "gpu2") {
      EXPECT_NEAR(f.time_factor, 2.0, 0.1);
    } else {
      EXPECT_NEAR(f.time_factor, 1.0, 0.05) << f.device_id;
    }
  }
  EXPECT_NEAR(got->median_factor, 1.0, 0.05);
  ASSERT_NE(got->Find("gpu2"), nullptr);
  EXPECT_EQ(got->Find("gpu9"), nullptr);
}

TEST(Calibration, NoiseAndOutliersAreIgnored) {
  const auto stages = Stages();
  auto reports = Reports(9, {}, 0.10, stages, /*seed=*/7);
  // Two outlier steps (a GC pause, a noisy neighbour) on gpu1.
  for (StepSample& r : reports) {
    if (r.worker_id == "w1" && (r.step == 3 || r.step == 6)) {
      for (TimingSample& t : r.timings) t.seconds *= 5;
    }
  }
  auto got = EstimateDeviceFactors(reports, stages);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->devices.size(), 4u);
  for (const DeviceFactor& f : got->devices) EXPECT_NEAR(f.time_factor, 1.0, 0.06) << f.device_id;
}

TEST(Calibration, TooFewReportsGiveNoFactor) {
  const auto stages = Stages();
  // 3 steps, the first is warm-up: 2 samples per device < min_samples 3.
  auto got = EstimateDeviceFactors(Reports(3, {{"gpu2", 2.0}}, 0, stages), stages,
                                   {.warmup_steps = 1, .min_samples = 3});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->devices.empty());
  EXPECT_EQ(got->median_factor, 1.0);
  // No reports at all.
  got = EstimateDeviceFactors({}, stages);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->devices.empty());
}

TEST(Calibration, FactorsAreRelativeToTheUncalibratedModel) {
  // The plan already modelled gpu2 as 2x slow; it really is 2x slow.
  const auto stages = Stages({{"gpu2", 2.0}});
  auto got = EstimateDeviceFactors(Reports(6, {{"gpu2", 2.0}}, 0, stages), stages);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_NE(got->Find("gpu2"), nullptr);
  EXPECT_NEAR(got->Find("gpu2")->time_factor, 2.0, 1e-9);  // not 1 and not 4
  EXPECT_NEAR(got->Find("gpu0")->time_factor, 1.0, 1e-9);
}

TEST(Calibration, SplitBackwardCountsOnce) {
  std::vector<PlannedStage> stages = {
      {.device_id = "a", .forward_seconds = 1, .backward_seconds = 2}};
  std::vector<StepSample> reports;
  for (int step = 0; step < 5; ++step) {
    reports.push_back({.worker_id = "w",
                       .step = step,
                       .timings = {{"0F0", 3}, {"0I0", 3}, {"0W0", 3}}});  // 9 s for 3 modelled
  }
  auto got = EstimateDeviceFactors(reports, stages);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->devices.size(), 1u);
  EXPECT_NEAR(got->devices[0].time_factor, 3.0, 1e-9);
}

TEST(Calibration, BadActionsAreInvalidArgument) {
  const auto stages = Stages();
  std::vector<StepSample> bad = {{.worker_id = "w", .step = 0, .timings = {{"zzz", 1}}}};
  const CalibrationOptions no_warmup{.warmup_steps = 0};
  EXPECT_EQ(EstimateDeviceFactors(bad, stages, no_warmup).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad[0].timings = {{"9F0", 1}};
  auto s = EstimateDeviceFactors(bad, stages, no_warmup);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("stage 9"), std::string::npos) << s.status();
}

ClusterSpec FourDevices() {
  ClusterSpec c;
  for (int d = 0; d < 4; ++d) {
    c.devices.push_back(
        {.id = absl::StrCat("gpu", d), .host = "h", .flops = 100e12, .memory_bytes = 80e9});
  }
  c.links.push_back({.src = "gpu0", .dst = "gpu3", .bandwidth = 1e9, .latency = 0});
  c.links.push_back({.src = "gpu0", .dst = "gpu1", .bandwidth = 1e9, .latency = 0});
  return c;
}

TEST(Calibration, CalibratedClusterDividesFlopsAndDropsExcluded) {
  auto got = CalibratedClusterSpec(FourDevices(), {{"gpu1", 2.0}, {"gpu2", 0.5}}, 1.25, {"gpu3"});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->devices.size(), 3u);
  EXPECT_DOUBLE_EQ(got->devices[0].flops, 100e12 / 1.25);  // default factor
  EXPECT_DOUBLE_EQ(got->devices[1].flops, 50e12);
  EXPECT_DOUBLE_EQ(got->devices[2].flops, 200e12);
  ASSERT_EQ(got->links.size(), 1u);
  EXPECT_EQ(got->links[0].dst, "gpu1");
  EXPECT_EQ(CalibratedClusterSpec(FourDevices(), {{"gpu1", 0}}, 1, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CalibratedClusterSpec(FourDevices(), {}, 1, {"gpu0", "gpu1", "gpu2", "gpu3"}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

Graph Chain(int n) {
  GraphSpec g;
  g.name = "chain";
  for (int i = 0; i < n; ++i) {
    NodeSpec node;
    node.id = absl::StrCat("n", i);
    node.forward_flops = 1e12;
    node.param_bytes = 1e6;
    node.activation_bytes = 1e3;
    node.output_bytes = 1e3;
    g.nodes.push_back(node);
    if (i > 0) g.edges.push_back({.src = absl::StrCat("n", i - 1), .dst = node.id});
  }
  auto built = Graph::Build(std::move(g));
  if (!built.ok()) std::abort();
  return std::move(*built);
}

TEST(Calibration, FixedPlanScoreMatchesThePlannerAndSeesTheStraggler) {
  const Graph graph = Chain(16);
  auto cluster = Cluster::Build(FourDevices());
  ASSERT_TRUE(cluster.ok());
  PlanOptions o;
  o.num_ranks = 4;
  o.microbatches = 4;
  o.schedule = schedule::ScheduleKind::k1F1B;
  o.method = PartitionMethod::kDp;
  auto plan = MakePlan(graph, *cluster, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  FixedPlan fixed{.node_stage = plan->partition.stage_of_node,
                  .stage_device = plan->stage_device,
                  .schedule = plan->schedule,
                  .ranks = plan->num_ranks,
                  .microbatches = plan->microbatches,
                  .chunks_per_rank = plan->chunks_per_rank};
  auto score = SimulateFixedPlan(graph, *cluster, fixed);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_NEAR(score->step_seconds, plan->step_seconds, 1e-9 * plan->step_seconds);

  // gpu1 twice slower: the same split gets slower; a re-plan under the
  // calibrated cluster beats it and gives gpu1 fewer nodes (wherever in the
  // pipeline the placement puts it).
  auto spec = CalibratedClusterSpec(FourDevices(), {{"gpu1", 2.0}}, 1.0, {});
  ASSERT_TRUE(spec.ok());
  auto slow = Cluster::Build(*spec);
  ASSERT_TRUE(slow.ok());
  auto slow_score = SimulateFixedPlan(graph, *slow, fixed);
  ASSERT_TRUE(slow_score.ok());
  EXPECT_GT(slow_score->step_seconds, 1.3 * score->step_seconds);
  auto replanned = MakePlan(graph, *slow, o);
  ASSERT_TRUE(replanned.ok());
  EXPECT_LT(replanned->step_seconds, 0.9 * slow_score->step_seconds);
  auto nodes_on_gpu1 = [&](const PlanResult& p, const Cluster& c) {
    int n = 0;
    for (size_t s = 0; s < p.stage_device.size(); ++s) {
      if (c.device(p.stage_device[s]).id == "gpu1") n += p.partition.stages[s].num_nodes;
    }
    return n;
  };
  EXPECT_LT(nodes_on_gpu1(*replanned, *slow), nodes_on_gpu1(*plan, *cluster));
}

}  // namespace
}  // namespace pipeplan
