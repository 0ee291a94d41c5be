#include <cmath>

#include "brute_force.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/core/partition.h"

namespace pipeplan {
namespace {

using testing::BruteForce;
using ::testing::HasSubstr;
using testing::MakeRandomInstance;
using testing::RandomInstanceOptions;

void ExpectNear(double got, double want) { EXPECT_LE(std::abs(got - want), 1e-9 * want); }

// On chains every valid split is a split of the one topological order, so the
// DP must match exhaustive search exactly, under both communication models,
// heterogeneous devices, binding memory caps and tied parameters.
TEST(ChainDpTest, MatchesBruteForceOnChains) {
  auto dp = MakeChainDpPartitioner();
  int compared = 0, infeasible = 0;
  for (uint32_t seed = 0; seed < 400; ++seed) {
    RandomInstanceOptions o;
    o.chain = true;
    o.nodes = 5 + seed % 5;
    o.stages = 2 + seed % 3;
    o.comm = seed % 2 ? CommModel::kRelay : CommModel::kDirect;
    o.heterogeneous = seed % 3 == 0;
    o.tight_memory = seed % 4 == 1;
    o.tied_params = seed % 5 == 2;
    auto inst = MakeRandomInstance(seed, o);
    const auto best = BruteForce(inst.problem);
    auto got = dp->Solve(inst.problem);
    if (std::isinf(best.best)) {
      ASSERT_FALSE(got.ok()) << "seed " << seed;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(got.ok()) << "seed " << seed << ": " << got.status();
    EXPECT_TRUE(got->fits_memory) << "seed " << seed;
    ExpectNear(got->objective, best.best);
    EXPECT_LE(got->lower_bound, best.best * (1 + 1e-9)) << "seed " << seed;
    if (o.comm == CommModel::kRelay) ExpectNear(got->lower_bound, best.best);
    ++compared;
  }
  EXPECT_GT(compared, 300);
  EXPECT_GT(infeasible, 0);  // the tight-memory cases include impossible ones
}

// Long chains, many stages: past brute force, but the lattice DP is exact on
// chains too (every ideal is a prefix), by another algorithm. The chain
// DP's search answers most of its bisection's tests without a pass (bands,
// known answers, jumps past infeasible thresholds); any error there would
// show as a different optimum or a split with a larger bottleneck.
TEST(ChainDpTest, MatchesLatticeDpOnLongChains) {
  auto dp = MakeChainDpPartitioner();
  auto lattice = MakeLatticeDpPartitioner();
  int compared = 0;
  for (uint32_t seed = 0; seed < 120; ++seed) {
    RandomInstanceOptions o;
    o.chain = true;
    o.nodes = 40 + seed % 50;
    o.stages = 3 + seed % 14;
    o.comm = CommModel::kRelay;
    o.heterogeneous = seed % 2 == 0;
    o.tight_memory = seed % 3 == 1;
    o.tied_params = seed % 5 == 2;
    auto inst = MakeRandomInstance(1000 + seed, o);
    auto want = lattice->Solve(inst.problem);
    auto got = dp->Solve(inst.problem);
    // The lattice DP may return a split over the memory caps (fits_memory
    // false) where none fits; only its fitting splits are a reference.
    if (!want.ok() || !want->fits_memory) {
      if (got.ok()) {
        EXPECT_TRUE(got->fits_memory) << "seed " << seed;
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << "seed " << seed << ": " << got.status();
    ExpectNear(got->objective, want->objective);
    EXPECT_LE(got->lower_bound, want->objective * (1 + 1e-9)) << "seed " << seed;
    ++compared;
  }
  EXPECT_GT(compared, 60);
}

// On general DAGs the DP searches one order: always valid, never better than
// the optimum, and it claims no bound it cannot prove.
TEST(ChainDpTest, ValidOnDagsAndBoundsHold) {
  auto dp = MakeChainDpPartitioner();
  for (uint32_t seed = 0; seed < 200; ++seed) {
    RandomInstanceOptions o;
    o.nodes = 6 + seed % 4;
    o.stages = 2 + seed % 3;
    o.comm = seed % 2 ? CommModel::kRelay : CommModel::kDirect;
    o.heterogeneous = seed % 3 == 0;
    auto inst = MakeRandomInstance(1000 + seed, o);
    const auto best = BruteForce(inst.problem);
    auto got = dp->Solve(inst.problem);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_GE(got->objective, best.best * (1 - 1e-9));
    EXPECT_LE(got->lower_bound, best.best * (1 + 1e-9));
    auto check = MakePartition(inst.problem, got->stage_of_node);
    ASSERT_TRUE(check.ok());
    ExpectNear(check->objective, got->objective);
  }
}

TEST(ChainDpTest, InfeasibleMemoryNamesTheNeed) {
  RandomInstanceOptions o;
  o.chain = true;
  o.nodes = 8;
  o.stages = 2;
  auto inst = MakeRandomInstance(7, o);
  ClusterSpec cs;
  cs.devices = {{.id = "a", .host = "h", .flops = 1e14, .memory_bytes = 1e6},
                {.id = "b", .host = "h", .flops = 1e14, .memory_bytes = 1e6}};
  Cluster tiny = *Cluster::Build(cs);
  CostModel cost(*inst.graph, tiny, inst.cost->options());
  inst.problem.cost = &cost;
  auto got = MakeChainDpPartitioner()->Solve(inst.problem);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("does not fit in memory"));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("GiB"));
}

TEST(ChainDpTest, RejectsMoreStagesThanNodes) {
  RandomInstanceOptions o;
  o.nodes = 3;
  o.stages = 4;
  auto inst = MakeRandomInstance(1, o);
  auto got = MakeChainDpPartitioner()->Solve(inst.problem);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BaselinesTest, AlwaysValidAndNeverBetterThanOptimal) {
  std::vector<std::unique_ptr<Partitioner>> baselines;
  baselines.push_back(MakeUniformPartitioner());
  baselines.push_back(MakeParamsPartitioner());
  baselines.push_back(MakeTimeBlockPartitioner());
  for (uint32_t seed = 0; seed < 100; ++seed) {
    RandomInstanceOptions o;
    o.nodes = 6 + seed % 4;
    o.stages = 2 + seed % 3;
    auto inst = MakeRandomInstance(5000 + seed, o);
    const auto best = BruteForce(inst.problem);
    for (const auto& b : baselines) {
      auto got = b->Solve(inst.problem);
      ASSERT_TRUE(got.ok()) << b->name() << ": " << got.status();
      EXPECT_GE(got->objective, best.best * (1 - 1e-9)) << b->name();
      EXPECT_EQ(got->stages.size(), static_cast<size_t>(o.stages));
    }
  }
}

TEST(BaselinesTest, UniformSplitsNodeCountsEvenly) {
  RandomInstanceOptions o;
  o.chain = true;
  o.nodes = 9;
  o.stages = 3;
  auto inst = MakeRandomInstance(3, o);
  auto got = MakeUniformPartitioner()->Solve(inst.problem);
  ASSERT_TRUE(got.ok());
  for (const StageCost& s : got->stages) EXPECT_EQ(s.num_nodes, 3);
}

TEST(BaselinesTest, TimeBlocksBalanceCompute) {
  // Work 1,1,1,1,4 over 2 stages: the best compute-only split is {1,1,1,1}{4}.
  GraphSpec spec;
  for (int i = 0; i < 5; ++i) {
    spec.nodes.push_back({.id = "n" + std::to_string(i), .forward_flops = i == 4 ? 4e12 : 1e12});
    if (i > 0) spec.edges.push_back({"n" + std::to_string(i - 1), "n" + std::to_string(i)});
  }
  Graph g = *Graph::Build(spec);
  ClusterSpec cs;
  cs.devices = {{.id = "a", .host = "h", .flops = 1e12, .memory_bytes = 1e12},
                {.id = "b", .host = "h", .flops = 1e12, .memory_bytes = 1e12}};
  Cluster c = *Cluster::Build(cs);
  CostModel cost(g, c, {});
  PartitionProblem p = testing::PipelineProblem(cost, 2);
  auto got = MakeTimeBlockPartitioner()->Solve(p);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->stage_of_node, (std::vector<int>{0, 0, 0, 0, 1}));
}

}  // namespace
}  // namespace pipeplan
