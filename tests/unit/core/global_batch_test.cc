// A fixed global batch: replicas x samples per replica = the batch, every
// microbatch count the batch allows (not a multiple of the ranks, and past
// 16 per rank when memory needs it), memory errors that name a change that
// does fit, --method returning that method's split, and the lower bounds
// the search prunes shapes and candidates with.
#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/core/planner.h"
#include "search_space.h"

namespace pipeplan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A chain of `n` transformer-like blocks, costs for one sample: big
// activations, modest parameters.
Graph Chain(int n, double activation_bytes, double param_bytes) {
  GraphSpec g{.name = "chain", .batch_size = 1};
  for (int v = 0; v < n; ++v) {
    g.nodes.push_back({.id = absl::StrCat("b", v),
                       .forward_flops = 4e11,
                       .param_bytes = param_bytes,
                       .activation_bytes = activation_bytes,
                       .output_bytes = activation_bytes / 8});
    if (v > 0) g.edges.push_back({absl::StrCat("b", v - 1), absl::StrCat("b", v), 0});
  }
  return *Graph::Build(std::move(g));
}

Cluster Devices(int count, double memory = 80.0 * (1 << 30)) {
  ClusterSpec c;
  for (int i = 0; i < count; ++i) {
    c.devices.push_back({absl::StrCat("gpu", i), absl::StrCat("host", i / 8), 3e14, memory});
  }
  return *Cluster::Build(std::move(c));
}

TEST(GlobalBatchTest, ReplicasTimesSamplesPerReplicaIsTheBatch) {
  const Graph g = Chain(12, 2e8, 2e8);
  for (int devices : {2, 4, 6}) {
    const Cluster c = Devices(devices);
    const PlanOptions o{.global_batch = 48, .method = PartitionMethod::kDp};
    auto plan = MakePlan(g, c, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const double samples_per_microbatch = plan->sample_scale * g.batch_size();
    EXPECT_NEAR(plan->num_replicas * plan->microbatches * samples_per_microbatch, 48, 1e-9);
  }
}

// 30 samples on 4 ranks: no count is a multiple of 4; the search's count is
// as good as every count planned on its own.
TEST(GlobalBatchTest, ChoosesTheBestMicrobatchCountAmongAllDivisors) {
  const Graph g = Chain(16, 2e8, 1e8);
  const Cluster c = Devices(4);
  PlanOptions o{.num_ranks = 4,
                .num_replicas = 1,
                .global_batch = 30,
                .schedule = schedule::ScheduleKind::k1F1B,
                .method = PartitionMethod::kDp};
  auto chosen = MakePlan(g, c, o);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_NE(chosen->microbatches % 4, 0);
  for (int m : {1, 2, 3, 5, 6, 10, 15, 30}) {
    o.microbatches = m;
    auto fixed = MakePlan(g, c, o);
    if (fixed.ok()) {
      EXPECT_LE(chosen->step_seconds, fixed->step_seconds * (1 + 1e-9)) << m;
    }
  }
}

// Activations of 1 GiB per sample and block: with at most 16 microbatches
// per rank (60 samples each on 2 devices) nothing fits, even recomputing;
// microbatches of one sample do.
TEST(GlobalBatchTest, TwoDevicesPlanWithManyMicrobatches) {
  const Graph g = Chain(8, 1.0 * (1 << 30), 1e9);
  const Cluster c = Devices(2);
  const PlanOptions o{.global_batch = 1920, .method = PartitionMethod::kDp};
  auto plan = MakePlan(g, c, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(plan->microbatches, 16 * plan->num_ranks);
  EXPECT_EQ(plan->num_replicas * plan->microbatches * plan->sample_scale, 1920);
}

// The number a memory error names in `pattern`'s group; 0 for another
// error or when it names none.
int NumberNamed(const absl::Status& status, const std::string& pattern) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) return 0;
  const std::string message(status.message());
  std::smatch match;
  return std::regex_search(message, match, std::regex(pattern)) ? std::stoi(match[1]) : 0;
}

// The error names a device count; a cluster of that many devices plans.
TEST(GlobalBatchTest, MemoryErrorNamesAChangeThatFits) {
  const Graph g = Chain(16, 1e8, 4e9);  // 64 GB of fp32 parameters
  const PlanOptions o{.global_batch = 64, .method = PartitionMethod::kDp};
  auto failed = MakePlan(g, Devices(2), o);
  const std::string message(failed.status().message());
  const int devices = NumberNamed(failed.status(), "use (\\d+) devices");
  ASSERT_GT(devices, 2) << message;
  auto planned = MakePlan(g, Devices(devices), o);
  EXPECT_TRUE(planned.ok()) << planned.status();
  // Fewer devices than named do not fit (the change is the smallest tried
  // by growing the pipeline).
  EXPECT_FALSE(MakePlan(g, Devices(devices - 1), o).ok()) << message;
}

// With the depth fixed too shallow on a cluster that has the devices, the
// error names the least depth that fits; that depth plans.
TEST(GlobalBatchTest, MemoryErrorNamesADeeperPipeline) {
  const Graph g = Chain(16, 1e8, 4e9);  // 64 GB of fp32 parameters
  PlanOptions o{.num_ranks = 2, .global_batch = 64, .method = PartitionMethod::kDp};
  auto failed = MakePlan(g, Devices(8), o);
  const std::string message(failed.status().message());
  const int ranks = NumberNamed(failed.status(), "--ranks (\\d+)");
  ASSERT_GT(ranks, 2) << message;
  o.num_ranks = ranks;
  EXPECT_TRUE(MakePlan(g, Devices(8), o).ok()) << message;
  o.num_ranks = ranks - 1;
  EXPECT_FALSE(MakePlan(g, Devices(8), o).ok()) << message;
}

TEST(GlobalBatchTest, MemoryErrorNeverSuggestsWhatIsSet) {
  const Graph g = Chain(16, 1e8, 4e9);
  PlanOptions o{.global_batch = 64, .optimizer = Optimizer::kSgd, .method = PartitionMethod::kDp};
  auto failed = MakePlan(g, Devices(1), o);
  ASSERT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(failed.status().message()), Not(HasSubstr("--optimizer sgd")));
  o.optimizer = Optimizer::kAdam;
  o.microbatches = 2;
  o.num_ranks = 1;
  auto adam = MakePlan(Chain(4, 4e9, 1e8), Devices(1), o);
  ASSERT_EQ(adam.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(adam.status().message());
  std::smatch match;
  ASSERT_TRUE(std::regex_search(message, match, std::regex("--microbatches (\\d+)"))) << message;
  o.microbatches = std::stoi(match[1]);
  EXPECT_TRUE(MakePlan(Chain(4, 4e9, 1e8), Devices(1), o).ok());
}

TEST(GlobalBatchTest, NamedMethodReturnsItsSplit) {
  const Graph g = Chain(10, 2e8, 2e8);
  const Cluster c = Devices(4);
  for (PartitionMethod m : {PartitionMethod::kIdealDp, PartitionMethod::kMilp}) {
    const PlanOptions o{.num_ranks = 4,
                        .num_replicas = 1,
                        .global_batch = 32,
                        .method = m,
                        .time_limit_seconds = 5};
    auto plan = MakePlan(g, c, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->method, PartitionMethodName(m));
  }
}

// Blocks of two parallel branches (the heavier one second in the order, so
// a topological prefix is not all of a node's ancestors) and a heavy node
// at the end (a head) or at the start (a stem), with measured times whose
// backward is not twice the forward: the bounds' heavy-node and round-trip
// terms decide on it.
Graph HeadedDag(int blocks, double heavy_seconds, double backward_ratio, bool stem) {
  GraphSpec g{.name = "headed", .batch_size = 1};
  auto node = [&](std::string id, double forward, double params) {
    g.nodes.push_back({.id = std::move(id),
                       .param_bytes = params,
                       .activation_bytes = 5e7,
                       .output_bytes = 1e6,
                       .forward_seconds = forward,
                       .backward_seconds = forward * backward_ratio});
  };
  node("in", stem ? heavy_seconds : 1e-4, stem ? 3e8 : 0);
  std::string last = "in";
  for (int b = 0; b < blocks; ++b) {
    const std::string x = absl::StrCat("x", b), y = absl::StrCat("y", b), z = absl::StrCat("z", b);
    node(x, 1e-3 * (1 + b % 3), 1e8);
    node(y, 3e-3, 2e8);
    node(z, 5e-4, 0);
    for (const std::string& branch : {x, y}) {
      g.edges.push_back({last, branch, 0});
      g.edges.push_back({branch, z, 0});
    }
    last = z;
  }
  node("head", stem ? 1e-4 : heavy_seconds, 3e8);
  g.edges.push_back({last, "head", 0});
  return *Graph::Build(std::move(g));
}

// Plans every candidate of `g` on `c` on its own (every placement of its
// shape) and checks both bounds against it; returns how many it planned.
int CheckBoundsOnEveryCandidate(const Graph& g, const Cluster& c, int batch) {
  using schedule::ScheduleKind;
  int planned = 0;
  PlanOptions o{.global_batch = batch, .method = PartitionMethod::kDp};
  const search::BoundInputs in = search::MakeBoundInputs(g, c, o);
  for (const search::Shape shape : search::ShapesToTry(g, c, o)) {
    for (ScheduleKind kind :
         {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B,
          ScheduleKind::kLoopedBFS, ScheduleKind::kInterleavedZeroBubble,
          ScheduleKind::kZBVZeroBubble, ScheduleKind::kDualPipeV}) {
      for (int m : search::MicrobatchesToTry(o, shape.ranks, shape.replicas)) {
        PlanOptions one = o;
        one.num_ranks = shape.ranks;
        one.num_replicas = shape.replicas;
        one.microbatches = batch > 0 ? m : 0;
        one.schedule = kind;
        auto plan = MakePlan(g, c, one);
        if (!plan.ok()) continue;
        const double unit = batch > 0
                                ? plan->step_seconds
                                : plan->step_seconds / (plan->microbatches * plan->num_replicas);
        EXPECT_LE(search::ShapeLowerBound(in, shape), unit * (1 + 1e-9));
        EXPECT_LE(search::CandidateLowerBound(in, shape, kind, plan->microbatches),
                  unit * (1 + 1e-9))
            << g.name() << " " << schedule::ScheduleKindName(kind) << " " << shape.ranks << "x"
            << shape.replicas << " m=" << plan->microbatches << " batch " << batch;
        ++planned;
      }
    }
  }
  return planned;
}

// The search skips a shape or a candidate when its lower bound reaches the
// best plan found: a bound above any plan it stands for could drop the
// optimum. Every candidate on small clusters, planned on its own, is at
// least both bounds; with a global batch and without (unit = step /
// (microbatches x replicas)); on chains and on DAGs with a heavy head.
TEST(GlobalBatchTest, PruningBoundsNeverExceedAPlan) {
  int planned = 0;
  for (uint32_t seed = 0; seed < 4; ++seed) {
    const Graph g = Chain(6 + seed, 1e8 * (1 + seed), 4e8 / (1 + seed));
    const Cluster c = Devices(seed % 2 == 0 ? 4 : 6);
    for (int batch : {0, 24}) planned += CheckBoundsOnEveryCandidate(g, c, batch);
  }
  EXPECT_GT(planned, 200);
}

TEST(GlobalBatchTest, PruningBoundsNeverExceedAPlanWithAHeavyNode) {
  int planned = 0;
  for (uint32_t seed = 0; seed < 6; ++seed) {
    // A heavy node worth a quarter to twice the rest; backward 0.5x to 3x
    // the forward.
    const Graph g =
        HeadedDag(3 + seed % 4, 6e-3 * (1 + 3 * (seed % 2)), 0.5 + (seed % 4) * 0.8, seed >= 4);
    const Cluster c = Devices(seed % 3 == 0 ? 4 : 6);
    for (int batch : {0, 12}) planned += CheckBoundsOnEveryCandidate(g, c, batch);
  }
  EXPECT_GT(planned, 150);
}

// PlanOptions::progress: the search reports screening from 0 to every
// shape, then sweeping to its end, never going back, and the best step it
// names is the plan's once the search ends.
TEST(SearchProgressTest, ScreensThenSweepsForwardToTheEnd) {
  const Graph g = Chain(12, 2e8, 2e8);
  const Cluster c = Devices(16);
  std::vector<SearchProgress> seen;
  PlanOptions o{.global_batch = 64, .method = PartitionMethod::kDp};
  o.progress = [&](const SearchProgress& p) { seen.push_back(p); };
  auto plan = MakePlan(g, c, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(seen.size(), 4u);
  EXPECT_EQ(seen.front().phase, SearchProgress::Phase::kScreening);
  EXPECT_EQ(seen.front().done, 0);
  EXPECT_GT(seen.front().total, 1);
  EXPECT_EQ(seen.back().phase, SearchProgress::Phase::kSweeping);
  EXPECT_EQ(seen.back().done, seen.back().total);
  EXPECT_DOUBLE_EQ(seen.back().best_step_seconds, plan->step_seconds);
  for (size_t i = 1; i < seen.size(); ++i) {
    const SearchProgress& a = seen[i - 1];
    const SearchProgress& b = seen[i];
    EXPECT_LE(a.phase, b.phase) << i;
    if (a.phase == b.phase) {
      EXPECT_LE(a.done, b.done) << i;
    }
    EXPECT_LE(b.done, b.total) << i;
  }
  const auto screened_to_end = std::find_if(seen.begin(), seen.end(), [](const SearchProgress& p) {
    return p.phase == SearchProgress::Phase::kScreening && p.done == p.total;
  });
  EXPECT_NE(screened_to_end, seen.end());
}

}  // namespace
}  // namespace pipeplan
