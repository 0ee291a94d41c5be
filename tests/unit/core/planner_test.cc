#include "pipeplan/core/planner.h"

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "brute_force.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/solve_partition.h"
#include "support/test_data.h"

namespace pipeplan {
namespace {

using schedule::ScheduleKind;
using testing::BruteForce;
using ::testing::HasSubstr;
using testing::MakeRandomInstance;
using testing::RandomInstanceOptions;

PlanInputs Load(const std::string& graph, const std::string& cluster) {
  v1::PlanRequest req;
  *req.mutable_graph() = testing::ReadJson<v1::ModelGraph>(graph);
  *req.mutable_cluster() = testing::ReadJson<v1::ClusterTopology>(cluster);
  auto in = PlanInputs::FromRequest(req);
  EXPECT_TRUE(in.ok()) << in.status();
  return std::move(*in);
}

TEST(PlannerOptionsTest, RejectsBadOptionsNamingTheField) {
  PlanInputs in = Load("chain_small.json", "cluster_8xa100.json");
  auto expect = [&](PlanOptions o, const std::string& message) {
    auto plan = MakePlan(*in.graph, *in.cluster, o);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr(message));
  };
  expect({.num_ranks = -1}, "options.num_ranks must be >= 0");
  expect({.num_ranks = 9}, "options.num_ranks is 9 but the cluster has only 8 devices");
  expect({.microbatches = -2}, "options.microbatches");
  expect({.microbatches = 3, .global_batch = 8}, "not divisible by options.microbatches");
  expect({.optimizer_state_multiplier = -1}, "options.optimizer_state_multiplier");
  expect({.time_limit_seconds = -1}, "options.time_limit_seconds");
  expect({.relative_gap = 1.5}, "options.relative_gap");
}

// Request options reach the search as given: 4 ranks x INT_MAX chunks per
// rank once overflowed int (UBSan) before the candidate was skipped.
TEST(PlannerOptionsTest, HugeChunksPerRankDoNotOverflow) {
  PlanInputs in = Load("chain_small.json", "cluster_8xa100.json");
  for (auto kind : {ScheduleKind::kInterleaved1F1B, ScheduleKind::k1F1B}) {
    auto plan = MakePlan(*in.graph, *in.cluster,
                         {.num_ranks = 4,
                          .schedule = kind,
                          .chunks_per_rank = std::numeric_limits<int>::max(),
                          .time_limit_seconds = 1});
    if (kind == ScheduleKind::k1F1B) {
      EXPECT_TRUE(plan.ok()) << plan.status();  // 1F1B holds one stage per rank
    } else {
      EXPECT_FALSE(plan.ok());
    }
  }
}

TEST(PlannerTest, FixedCandidateIsOptimalOnChains) {
  // With RELAY on a chain the planner's split must be exactly optimal.
  for (uint32_t seed = 0; seed < 40; ++seed) {
    RandomInstanceOptions o{.nodes = 8, .stages = 3, .chain = true, .comm = CommModel::kRelay};
    auto inst = MakeRandomInstance(seed, o);
    // The planner computes its own in-flight counts: 1F1B with 4 microbatches
    // holds min(4, 3 - j) on stage j, as the random instance assumes.
    const auto best = BruteForce(inst.problem);
    // fp32: the instance's cost model reads the graph's bytes as they are.
    auto plan = MakePlan(*inst.graph, *inst.cluster,
                         {.num_ranks = 3,
                          .microbatches = 4,
                          .optimizer_state_multiplier = 2,
                          .precision = Precision::kFp32,
                          .schedule = ScheduleKind::k1F1B,
                          .comm_model = CommModel::kRelay});
    if (std::isinf(best.best)) {
      EXPECT_FALSE(plan.ok());
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_NEAR(plan->partition.objective, best.best, 1e-9 * best.best) << "seed " << seed;
    EXPECT_LE(plan->lower_bound, best.best * (1 + 1e-9));
    EXPECT_EQ(plan->schedule, ScheduleKind::k1F1B);
    EXPECT_EQ(plan->microbatches, 4);
    EXPECT_GT(plan->step_seconds, 0);
  }
}

TEST(PlannerTest, AutoIsNeverWorseThanAnyMethod) {
  for (uint32_t seed = 0; seed < 60; ++seed) {
    RandomInstanceOptions o{.nodes = 7 + static_cast<int>(seed % 3),
                            .stages = 2 + static_cast<int>(seed % 3),
                            .heterogeneous = seed % 2 == 0,
                            .comm = seed % 3 ? CommModel::kDirect : CommModel::kRelay};
    auto inst = MakeRandomInstance(300 + seed, o);
    auto all = SolvePartition(inst.problem, PartitionMethod::kAuto);
    ASSERT_TRUE(all.ok()) << all.status();
    for (PartitionMethod m :
         {PartitionMethod::kDp, PartitionMethod::kIdealDp, PartitionMethod::kMilp,
          PartitionMethod::kUniform, PartitionMethod::kParams, PartitionMethod::kTime}) {
      auto one = SolvePartition(inst.problem, m);
      if (!one.ok()) continue;
      EXPECT_LE(all->partition.objective, one->partition.objective * (1 + 1e-9))
          << PartitionMethodName(m) << " seed " << seed;
    }
    const auto best = BruteForce(inst.problem);
    EXPECT_LE(all->lower_bound, best.best * (1 + 1e-9));
    EXPECT_GE(all->partition.objective, best.best * (1 - 1e-9));
  }
}

TEST(PlannerTest, SearchPicksTheFastestCandidateAndListsRunnersUp) {
  PlanInputs in = Load("gpt_1k.json", "cluster_8xa100.json");
  auto plan =
      MakePlan(*in.graph, *in.cluster, {.global_batch = 32, .method = PartitionMethod::kDp});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->alternatives.empty());
  for (const PlanAlternative& alt : plan->alternatives) {
    EXPECT_LE(plan->step_seconds, alt.step_seconds);
    EXPECT_EQ(32 % alt.microbatches, 0);
  }
  EXPECT_EQ(32 % plan->microbatches, 0);
  EXPECT_EQ(plan->stage_device.size(),
            static_cast<size_t>(plan->num_ranks * plan->chunks_per_rank));
  for (size_t s = 0; s < plan->stage_peak_memory.size(); ++s) {
    EXPECT_LE(plan->stage_peak_memory[s],
              in.cluster->device(plan->stage_device[s]).memory_bytes / plan->chunks_per_rank);
  }
}

TEST(PlannerTest, WithoutGlobalBatchTheSearchComparesThroughput) {
  // Candidates run different microbatch counts of the same size, so the
  // winner is the one with the least time per microbatch, not per step.
  PlanInputs in = Load("resnet50.json", "cluster_4_mixed.json");
  auto plan = MakePlan(*in.graph, *in.cluster, {.max_replicas = 1, .method = PartitionMethod::kDp});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->alternatives.empty());
  const double best = plan->step_seconds / plan->microbatches;
  for (const PlanAlternative& alt : plan->alternatives) {
    EXPECT_LE(best, alt.step_seconds / alt.microbatches * (1 + 1e-12));
  }
  EXPECT_GT(plan->num_ranks, 1);  // one device alone is slower per microbatch
  // With replicas allowed a step runs microbatches x replicas of them.
  auto wide = MakePlan(*in.graph, *in.cluster, {.method = PartitionMethod::kDp});
  ASSERT_TRUE(wide.ok()) << wide.status();
  const double wide_best = wide->step_seconds / (wide->microbatches * wide->num_replicas);
  EXPECT_LE(wide_best, best * (1 + 1e-12));
  for (const PlanAlternative& alt : wide->alternatives) {
    EXPECT_LE(wide_best, alt.step_seconds / (alt.microbatches * alt.num_replicas) * (1 + 1e-12));
  }
}

TEST(PlannerTest, MicrobatchSizeRescalesCosts) {
  PlanInputs in = Load("gpt_1k.json", "cluster_8xa100.json");
  auto plan_for = [&](int m) {
    return MakePlan(*in.graph, *in.cluster,
                    {.num_ranks = 4,
                     .num_replicas = 1,
                     .microbatches = m,
                     .global_batch = 16,
                     .schedule = ScheduleKind::kGPipe,
                     .method = PartitionMethod::kDp});
  };
  auto coarse = plan_for(4), fine = plan_for(8);
  ASSERT_TRUE(coarse.ok() && fine.ok());
  // Half the samples per microbatch: half the compute per microbatch.
  double coarse_compute = 0, fine_compute = 0;
  for (const StageCost& s : coarse->partition.stages) coarse_compute += s.compute_seconds();
  for (const StageCost& s : fine->partition.stages) fine_compute += s.compute_seconds();
  EXPECT_NEAR(fine_compute, coarse_compute / 2, 1e-9 * coarse_compute);
  EXPECT_DOUBLE_EQ(coarse->sample_scale, 4.0);
}

TEST(PlannerTest, MemoryBindsTheChoice) {
  PlanInputs in = Load("gpt_4k.json", "cluster_16_small_mem.json");
  auto plan =
      MakePlan(*in.graph, *in.cluster,
               {.num_ranks = 16, .optimizer_state_multiplier = 6, .method = PartitionMethod::kDp});
  if (plan.ok()) {
    for (size_t s = 0; s < plan->stage_peak_memory.size(); ++s) {
      EXPECT_LE(plan->stage_peak_memory[s],
                in.cluster->device(plan->stage_device[s]).memory_bytes / plan->chunks_per_rank);
    }
  } else {
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  // Far more optimizer state than any device holds: refused, naming the need.
  auto impossible = MakePlan(*in.graph, *in.cluster,
                             {.num_ranks = 16,
                              .microbatches = 16,
                              .optimizer_state_multiplier = 1000,
                              .schedule = ScheduleKind::k1F1B});
  ASSERT_FALSE(impossible.ok());
  EXPECT_EQ(impossible.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(impossible.status().message()), HasSubstr("GiB"));
}

TEST(PlannerTest, TimeLimitIsHonouredWithAnIncumbent) {
  PlanInputs in = Load("resnet50.json", "cluster_2x8_h100.json");
  auto plan = MakePlan(*in.graph, *in.cluster,
                       {.num_ranks = 8,
                        .microbatches = 32,
                        .schedule = ScheduleKind::k1F1B,
                        .time_limit_seconds = 1,
                        .relative_gap = 1e-9});
  // The elapsed time against the limit is measured by bench/deadline_bench.cc.
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(plan->partition.objective, 0);
  EXPECT_LE(plan->lower_bound, plan->partition.objective);
}

TEST(PlannerTest, CancelledBeforeStartStillAnswersQuickly) {
  PlanInputs in = Load("gpt_1k.json", "cluster_8xa100.json");
  std::atomic<bool> cancelled{true};
  auto plan = MakePlan(*in.graph, *in.cluster,
                       {.num_ranks = 8,
                        .microbatches = 16,
                        .schedule = ScheduleKind::k1F1B,
                        .cancelled = &cancelled});
  // The first solver always produces a split; a cancelled solve returns it.
  if (plan.ok()) {
    EXPECT_GT(plan->partition.objective, 0);
  }
}

}  // namespace
}  // namespace pipeplan
