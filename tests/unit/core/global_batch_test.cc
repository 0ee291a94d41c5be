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

// The error names a device count; a cluster of that many devices plans.
TEST(GlobalBatchTest, MemoryErrorNamesAChangeThatFits) {
  const Graph g = Chain(16, 1e8, 4e9);  // 64 GB of fp32 parameters
  const PlanOptions o{.global_batch = 64, .method = PartitionMethod::kDp};
  auto failed = MakePlan(g, Devices(2), o);
  ASSERT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(failed.status().message());
  std::smatch match;
  ASSERT_TRUE(std::regex_search(message, match, std::regex("use (\\d+) devices"))) << message;
  const int devices = std::stoi(match[1]);
  EXPECT_GT(devices, 2);
  auto planned = MakePlan(g, Devices(devices), o);
  EXPECT_TRUE(planned.ok()) << planned.status();
  // Fewer devices than named do not fit (the change is the smallest tried
  // by growing the pipeline).
  EXPECT_FALSE(MakePlan(g, Devices(devices - 1), o).ok()) << message;
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

// The search skips a shape or a candidate when its lower bound reaches the
// best plan found: a bound above any plan it stands for could drop the
// optimum. Every candidate on small clusters, planned on its own (every
// placement of its shape), is at least both bounds; with a global batch and
// without (unit = step / (microbatches x replicas)).
TEST(GlobalBatchTest, PruningBoundsNeverExceedAPlan) {
  using schedule::ScheduleKind;
  int planned = 0;
  for (uint32_t seed = 0; seed < 4; ++seed) {
    const Graph g = Chain(6 + seed, 1e8 * (1 + seed), 4e8 / (1 + seed));
    const Cluster c = Devices(seed % 2 == 0 ? 4 : 6);
    for (int batch : {0, 24}) {
      PlanOptions o{.global_batch = batch, .method = PartitionMethod::kDp};
      const search::BoundInputs in = search::MakeBoundInputs(g, c, o);
      for (const search::Shape shape : search::ShapesToTry(g, c, o)) {
        for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                                  ScheduleKind::kInterleaved1F1B, ScheduleKind::kZBVZeroBubble}) {
          for (int m : search::MicrobatchesToTry(o, shape.ranks, shape.replicas)) {
            PlanOptions one = o;
            one.num_ranks = shape.ranks;
            one.num_replicas = shape.replicas;
            one.microbatches = batch > 0 ? m : 0;
            one.schedule = kind;
            auto plan = MakePlan(g, c, one);
            if (!plan.ok()) continue;
            const double unit =
                batch > 0 ? plan->step_seconds
                          : plan->step_seconds / (plan->microbatches * plan->num_replicas);
            EXPECT_LE(search::ShapeLowerBound(in, shape), unit * (1 + 1e-9));
            EXPECT_LE(search::CandidateLowerBound(in, shape, kind, plan->microbatches),
                      unit * (1 + 1e-9))
                << schedule::ScheduleKindName(kind) << " " << shape.ranks << "x" << shape.replicas
                << " m=" << plan->microbatches << " batch " << batch;
            ++planned;
          }
        }
      }
    }
  }
  EXPECT_GT(planned, 200);
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
