// The search over pipeline depth x data-parallel width x placement: its
// optimum equals brute force over every (ranks, replicas, device
// assignment) on small clusters, it does not depend on the order devices are
// listed in, and it leaves slow devices idle or adds replicas when that is
// faster.
#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/placement.h"
#include "pipeplan/core/planner.h"
#include "support/test_data.h"

namespace pipeplan {
namespace {

using schedule::ScheduleKind;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A chain-like graph of `n` nodes, every one with compute and parameters, a
// few skip edges; costs for a microbatch of 4 samples.
GraphSpec SmallGraph(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  GraphSpec g{.name = "small", .batch_size = 4};
  for (int v = 0; v < n; ++v) {
    g.nodes.push_back({.id = absl::StrCat("n", v),
                       .forward_flops = 2e12 * (0.3 + unit(rng)),
                       .param_bytes = 4e8 * (0.2 + unit(rng)),
                       .activation_bytes = 2e8 * (0.5 + unit(rng)),
                       .output_bytes = 3e7 * (0.5 + unit(rng))});
    if (v > 0) g.edges.push_back({absl::StrCat("n", v - 1), absl::StrCat("n", v), 0});
    if (v > 1 && unit(rng) < 0.3) {
      g.edges.push_back({absl::StrCat("n", v - 2), absl::StrCat("n", v), 0});
    }
  }
  return g;
}

// Three device types over two hosts.
ClusterSpec MixedCluster(const std::vector<std::tuple<std::string, std::string, int>>& devices) {
  const std::map<std::string, std::pair<double, double>> kTypes = {
      {"fast", {3e14, 8e9}}, {"mid", {2e14, 12e9}}, {"slow", {1e14, 16e9}}};
  ClusterSpec c{.intra_host_bandwidth = 5e10, .inter_host_bandwidth = 5e9};
  int i = 0;
  for (const auto& [type, host, count] : devices) {
    for (int k = 0; k < count; ++k) {
      const auto [flops, memory] = kTypes.at(type);
      c.devices.push_back({absl::StrCat(type, i++), host, flops, memory});
    }
  }
  return c;
}

double Unit(const PlanResult& p, const PlanOptions& o, const Graph& g) {
  if (o.global_batch > 0 && g.batch_size() > 0) return p.step_seconds;
  return p.step_seconds / (p.microbatches * p.num_replicas);
}

// Every (ranks, replicas) and every injective assignment of devices to its
// slots; assignments that differ only by devices of the same type and host
// (this test's clusters have no per-link overrides) or by the order of
// replicas are scored once.
double BruteForce(const Graph& graph, const Cluster& cluster, const PlanOptions& options) {
  const int n = cluster.num_devices();
  double best = kInf;
  for (int p = 1; p <= n; ++p) {
    for (int d = 1; p * d <= n; ++d) {
      if (options.global_batch % d != 0 || (options.global_batch / d) % options.microbatches) {
        continue;
      }
      std::vector<int> order(n);
      for (int i = 0; i < n; ++i) order[i] = i;
      std::set<std::string> seen;
      do {
        Placement placement{.ranks = p, .replicas = d};
        placement.devices.assign(order.begin(), order.begin() + p * d);
        std::vector<std::string> rows;
        for (int q = 0; q < d; ++q) {
          std::vector<std::string> row;
          for (int r = 0; r < p; ++r) {
            const DeviceSpec& dev = cluster.device(placement.device(q, r));
            row.push_back(absl::StrCat(dev.host, "/", dev.flops, "/", dev.memory_bytes));
          }
          rows.push_back(absl::StrJoin(row, ","));
        }
        std::sort(rows.begin(), rows.end());
        if (!seen.insert(absl::StrJoin(rows, ";")).second) continue;
        absl::StatusOr<PlanResult> plan = PlanOnPlacement(graph, cluster, options, placement);
        if (plan.ok() && !plan->degenerate()) best = std::min(best, Unit(*plan, options, graph));
      } while (std::next_permutation(order.begin(), order.end()));
    }
  }
  return best;
}

TEST(DataParallelSearch, EqualsBruteForceOverShapesAndPlacements) {
  struct Case {
    uint32_t seed;
    std::vector<std::tuple<std::string, std::string, int>> devices;
  };
  const std::vector<Case> cases = {
      {1, {{"fast", "h0", 2}, {"mid", "h0", 1}, {"mid", "h1", 1}, {"slow", "h1", 2}}},
      {2, {{"fast", "h0", 1}, {"slow", "h0", 2}, {"mid", "h1", 3}}},
      {3, {{"fast", "h0", 3}, {"mid", "h0", 3}, {"slow", "h0", 2}}},
  };
  for (const Case& c : cases) {
    auto graph = Graph::Build(SmallGraph(c.seed, 8));
    auto cluster = Cluster::Build(MixedCluster(c.devices));
    ASSERT_TRUE(graph.ok() && cluster.ok());
    const PlanOptions options{.microbatches = 2,
                              .global_batch = 16,
                              .schedule = ScheduleKind::k1F1B,
                              .method = PartitionMethod::kDp,
                              .time_limit_seconds = 300};
    absl::StatusOr<PlanResult> plan = MakePlan(*graph, *cluster, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->placement, "exhaustive");
    const double brute = BruteForce(*graph, *cluster, options);
    ASSERT_TRUE(std::isfinite(brute)) << "seed " << c.seed;
    EXPECT_NEAR(Unit(*plan, options, *graph), brute, 0.005 * brute) << "seed " << c.seed;
  }
}

std::vector<int> Shuffled(int n, uint32_t seed) {
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  if (seed == 0) {
    std::reverse(order.begin(), order.end());
  } else {
    std::mt19937 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

void ExpectOrderInvariant(const Graph& graph, const ClusterSpec& spec, const PlanOptions& options) {
  auto base_cluster = Cluster::Build(spec);
  ASSERT_TRUE(base_cluster.ok());
  absl::StatusOr<PlanResult> base = MakePlan(graph, *base_cluster, options);
  ASSERT_TRUE(base.ok()) << base.status();
  for (uint32_t seed : {0u, 1u, 2u, 3u}) {
    ClusterSpec permuted = spec;
    permuted.devices.clear();
    for (int i : Shuffled(static_cast<int>(spec.devices.size()), seed)) {
      permuted.devices.push_back(spec.devices[i]);
    }
    std::reverse(permuted.links.begin(), permuted.links.end());
    auto cluster = Cluster::Build(permuted);
    ASSERT_TRUE(cluster.ok());
    absl::StatusOr<PlanResult> plan = MakePlan(graph, *cluster, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_NEAR(plan->step_seconds, base->step_seconds, 0.005 * base->step_seconds)
        << "order " << seed;
    EXPECT_EQ(plan->num_ranks, base->num_ranks);
    EXPECT_EQ(plan->num_replicas, base->num_replicas);
  }
}

TEST(DataParallelSearch, DeviceOrderDoesNotMatter) {
  PlanInputs in;
  {
    v1::PlanRequest req;
    *req.mutable_graph() = testing::ReadJson<v1::ModelGraph>("resnet50.json");
    *req.mutable_cluster() = testing::ReadJson<v1::ClusterTopology>("cluster_4_mixed.json");
    auto parsed = PlanInputs::FromRequest(req);
    ASSERT_TRUE(parsed.ok());
    in = *std::move(parsed);
    ExpectOrderInvariant(*in.graph, ClusterSpecFromProto(req.cluster()),
                         {.global_batch = 64, .method = PartitionMethod::kDp});
  }
  // Three types over two hosts with a slow link of their own.
  ClusterSpec mixed =
      MixedCluster({{"fast", "h0", 2}, {"mid", "h0", 2}, {"mid", "h1", 2}, {"slow", "h1", 2}});
  mixed.links.push_back({"fast0", "mid2", 1e9, 1e-4});
  auto graph = Graph::Build(SmallGraph(7, 10));
  ASSERT_TRUE(graph.ok());
  ExpectOrderInvariant(*graph, mixed,
                       {.microbatches = 4,
                        .global_batch = 32,
                        .schedule = ScheduleKind::k1F1B,
                        .method = PartitionMethod::kDp});
}

TEST(DataParallelSearch, ChoosesReplicasWhenFasterAndNeverADegenerateStage) {
  v1::PlanRequest req;
  *req.mutable_graph() = testing::ReadJson<v1::ModelGraph>("gpt_1k.json");
  *req.mutable_cluster() = testing::ReadJson<v1::ClusterTopology>("cluster_8xa100.json");
  auto in = PlanInputs::FromRequest(req);
  ASSERT_TRUE(in.ok());
  auto plan =
      MakePlan(*in->graph, *in->cluster, {.global_batch = 32, .method = PartitionMethod::kDp});
  auto pipeline = MakePlan(*in->graph, *in->cluster,
                           {.max_replicas = 1, .global_batch = 32, .method = PartitionMethod::kDp});
  ASSERT_TRUE(plan.ok() && pipeline.ok());
  EXPECT_LE(plan->step_seconds, pipeline->step_seconds);
  EXPECT_GT(plan->num_replicas, 1);
  EXPECT_EQ(pipeline->num_replicas, 1);
  for (const PlanResult* p : {&*plan, &*pipeline}) {
    EXPECT_FALSE(p->degenerate());
    for (const StageCost& s : p->partition.stages) EXPECT_GT(s.compute_seconds(), 0);
    // The best plan of every shape is listed, the chosen one first.
    ASSERT_FALSE(p->shapes.empty());
    EXPECT_EQ(p->shapes.front().num_ranks, p->num_ranks);
    EXPECT_EQ(p->shapes.front().num_replicas, p->num_replicas);
    for (const PlanAlternative& s : p->shapes) EXPECT_LE(p->step_seconds, s.step_seconds);
  }
  // Every (replica, rank) on its own device; replica 0 runs the stages.
  std::set<int> used(plan->rank_device.begin(), plan->rank_device.end());
  EXPECT_EQ(used.size(), static_cast<size_t>(plan->num_ranks * plan->num_replicas));
  for (size_t s = 0; s < plan->stage_device.size(); ++s) {
    EXPECT_TRUE(std::count(plan->rank_device.begin(), plan->rank_device.begin() + plan->num_ranks,
                           plan->stage_device[s]));
  }
}

TEST(DataParallelSearch, LeavesAFarSlowerDeviceIdle) {
  ClusterSpec spec = MixedCluster({{"fast", "h0", 3}});
  spec.devices.push_back({"crawl", "h0", 3e12, 8e9});
  auto cluster = Cluster::Build(spec);
  auto graph = Graph::Build(SmallGraph(3, 8));
  ASSERT_TRUE(cluster.ok() && graph.ok());
  auto plan = MakePlan(*graph, *cluster, {.global_batch = 12, .method = PartitionMethod::kDp});
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (int d : plan->rank_device) EXPECT_NE(cluster->device(d).id, "crawl");
  EXPECT_EQ(plan->num_ranks * plan->num_replicas, 3);
}

TEST(DataParallelSearch, HonoursReplicaOptions) {
  auto cluster = Cluster::Build(MixedCluster({{"fast", "h0", 4}, {"fast", "h1", 4}}));
  auto graph = Graph::Build(SmallGraph(5, 8));
  ASSERT_TRUE(cluster.ok() && graph.ok());
  auto capped = MakePlan(*graph, *cluster,
                         {.max_replicas = 1, .global_batch = 16, .method = PartitionMethod::kDp});
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->num_replicas, 1);
  auto fixed = MakePlan(
      *graph, *cluster,
      {.num_ranks = 2, .num_replicas = 4, .global_batch = 16, .method = PartitionMethod::kDp});
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->num_ranks, 2);
  EXPECT_EQ(fixed->num_replicas, 4);
  EXPECT_EQ(fixed->rank_device.size(), 8u);
  for (double s : fixed->stage_allreduce_seconds) EXPECT_GT(s, 0);
  auto bad = MakePlan(*graph, *cluster, {.num_ranks = 3, .num_replicas = 3});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  auto too_wide = MakePlan(*graph, *cluster, {.num_replicas = 3, .global_batch = 16});
  ASSERT_FALSE(too_wide.ok());
  EXPECT_THAT(std::string(too_wide.status().message()), ::testing::HasSubstr("num_replicas"));
}

// The all-reduce of a rank that finishes its last backward early overlaps
// the other ranks' cool-down; the step is at least the slowest pipeline.
TEST(DataParallelSearch, AllReduceAddsToTheStepAfterTheLastBackward) {
  auto cluster = Cluster::Build(MixedCluster({{"fast", "h0", 2}, {"fast", "h1", 2}}));
  auto graph = Graph::Build(SmallGraph(9, 8));
  ASSERT_TRUE(cluster.ok() && graph.ok());
  const Placement across{.ranks = 2, .replicas = 2, .devices = {0, 1, 2, 3}};
  const Placement within{.ranks = 2, .replicas = 2, .devices = {0, 2, 1, 3}};
  const PlanOptions o{.microbatches = 4,
                      .global_batch = 16,
                      .schedule = ScheduleKind::k1F1B,
                      .method = PartitionMethod::kDp};
  auto slow_ring = PlanOnPlacement(*graph, *cluster, o, across);
  auto fast_ring = PlanOnPlacement(*graph, *cluster, o, within);
  ASSERT_TRUE(slow_ring.ok() && fast_ring.ok());
  // Rank groups within a host all-reduce over the fast link.
  EXPECT_LT(fast_ring->stage_allreduce_seconds[0], slow_ring->stage_allreduce_seconds[0]);
  for (const PlanResult* p : {&*slow_ring, &*fast_ring}) {
    EXPECT_GE(p->allreduce_exposed_seconds, 0);
    EXPECT_LE(p->allreduce_exposed_seconds, *std::max_element(p->stage_allreduce_seconds.begin(),
                                                              p->stage_allreduce_seconds.end()) *
                                                (1 + 1e-9));
  }
  auto twice =
      PlanOnPlacement(*graph, *cluster, o, {.ranks = 2, .replicas = 2, .devices = {0, 0, 1, 2}});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
}

// DistinctMoves names moves instead of building placements, and keys them
// without strings: the placements it reaches are exactly one of each key
// that some single move reaches (PlacementKey, built the slow way here),
// and never the start's.
TEST(PlacementMoves, OneOfEveryPlacementKeyOneMoveAway) {
  auto cluster = Cluster::Build(
      MixedCluster({{"fast", "h0", 2}, {"mid", "h0", 1}, {"fast", "h1", 2}, {"slow", "h1", 2}}));
  ASSERT_TRUE(cluster.ok());
  const std::vector<int> classes = DeviceClasses(*cluster);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int ranks = 1 + trial % 3, replicas = 1 + trial % 2;
    std::vector<int> order(cluster->num_devices());
    for (int i = 0; i < cluster->num_devices(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    Placement start{.ranks = ranks, .replicas = replicas};
    start.devices.assign(order.begin(), order.begin() + ranks * replicas);
    std::set<std::string> want;  // every key one move reaches, but the start's
    const int slots = ranks * replicas;
    for (int i = 0; i < slots; ++i) {
      for (int j = i + 1; j < slots; ++j) {
        want.insert(PlacementKey(classes, ApplyMove(start, {.slot = i, .other_slot = j})));
      }
      for (int d = 0; d < cluster->num_devices(); ++d) {
        if (std::find(start.devices.begin(), start.devices.end(), d) != start.devices.end()) {
          continue;
        }
        want.insert(PlacementKey(classes, ApplyMove(start, {.slot = i, .device = d})));
      }
    }
    want.erase(PlacementKey(classes, start));
    std::set<std::string> got;
    for (const Placement& p : SwapNeighbours(*cluster, start)) {
      EXPECT_TRUE(got.insert(PlacementKey(classes, p)).second) << "a duplicate, trial " << trial;
    }
    EXPECT_EQ(got, want) << "trial " << trial;
  }
}

// The worst-replica pipeline looks one replica per host pattern up where no
// Link overrides a device: the same as taking every replica's links.
TEST(PlacementMoves, WorstReplicaClusterMatchesEveryReplica) {
  auto cluster = Cluster::Build(
      MixedCluster({{"fast", "h0", 3}, {"slow", "h1", 3}, {"mid", "h2", 3}, {"fast", "h3", 3}}));
  ASSERT_TRUE(cluster.ok());
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    const int ranks = 2 + trial % 3, replicas = 1 + (trial / 3) % 3;  // at most 12 slots
    std::vector<int> order(cluster->num_devices());
    for (int i = 0; i < cluster->num_devices(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    Placement p{.ranks = ranks, .replicas = replicas};
    p.devices.assign(order.begin(), order.begin() + ranks * replicas);
    const Cluster worst = WorstReplicaCluster(*cluster, p);
    for (int r = 0; r < ranks; ++r) {
      for (int s = 0; s < ranks; ++s) {
        if (r == s) continue;
        double bw = kInf, lat = 0;
        for (int q = 0; q < replicas; ++q) {
          bw = std::min(bw, cluster->bandwidth(p.device(q, r), p.device(q, s)));
          lat = std::max(lat, cluster->latency(p.device(q, r), p.device(q, s)));
        }
        EXPECT_EQ(worst.bandwidth(r, s), bw) << trial;
        EXPECT_EQ(worst.latency(r, s), lat) << trial;
      }
    }
  }
}

}  // namespace
}  // namespace pipeplan
