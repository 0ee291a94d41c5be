// Tests of the ideal-lattice DP ("ideal_dp"): separators, ideal enumeration,
// optimality and bound validity against brute force, refusal of wide graphs.
#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../../../planner_service/core/partition/lattice/direct_pair_dp.h"
#include "../../../planner_service/core/partition/lattice/ideal_lattice.h"
#include "../../../planner_service/core/partition/lattice/separators.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "brute_force.h"
#include "gtest/gtest.h"
#include "pipeplan/core/partition.h"

namespace pipeplan {
namespace {

using lattice_dp_internal::CountIdeals;
using lattice_dp_internal::DirectPairOptimum;
using lattice_dp_internal::FindSeparators;
using testing::BruteForce;
using testing::MakeRandomInstance;
using testing::PipelineProblem;
using testing::RandomInstance;
using testing::RandomInstanceOptions;

Graph MakeGraph(int n, const std::vector<std::pair<int, int>>& edges) {
  GraphSpec spec;
  spec.name = "hand";
  for (int v = 0; v < n; ++v) {
    NodeSpec node;
    node.id = absl::StrCat("v", v);
    node.forward_flops = 1e12;
    node.output_bytes = 1e6;
    spec.nodes.push_back(node);
  }
  for (auto [a, b] : edges) spec.edges.push_back({absl::StrCat("v", a), absl::StrCat("v", b), 0});
  auto g = Graph::Build(std::move(spec));
  EXPECT_TRUE(g.ok()) << g.status();
  return std::move(*g);
}

std::vector<int> SeparatorList(const Graph& g) {
  std::vector<char> sep = FindSeparators(g);
  std::vector<int> out;
  for (int v = 0; v < g.num_nodes(); ++v) {
    if (sep[v]) out.push_back(v);
  }
  return out;
}

// Reference: v is a separator iff every other node is an ancestor or a
// descendant (transitive closure by DFS).
std::vector<int> SlowSeparators(const Graph& g) {
  const int n = g.num_nodes();
  std::vector<std::vector<char>> reach(n, std::vector<char>(n, 0));
  for (int s = 0; s < n; ++s) {
    std::vector<int> stack = {s};
    reach[s][s] = 1;
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      for (int e : g.out_edges(v)) {
        const int w = g.edge(e).dst;
        if (!reach[s][w]) reach[s][w] = 1, stack.push_back(w);
      }
    }
  }
  std::vector<int> out;
  for (int v = 0; v < n; ++v) {
    bool all = true;
    for (int u = 0; u < n; ++u) all &= reach[u][v] || reach[v][u];
    if (all) out.push_back(v);
  }
  return out;
}

int64_t SlowCountIdeals(const Graph& g) {
  const int n = g.num_nodes();
  int64_t count = 0;
  for (uint32_t m = 0; m < (1u << n); ++m) {
    bool closed = true;
    for (int e = 0; e < g.num_edges() && closed; ++e) {
      if ((m >> g.edge(e).dst & 1) && !(m >> g.edge(e).src & 1)) closed = false;
    }
    count += closed;
  }
  return count;
}

TEST(LatticeSeparatorsTest, ChainWithSkipEdgesIsAllSeparators) {
  Graph g = MakeGraph(6, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {0, 2}, {1, 4}, {2, 5}});
  EXPECT_EQ(SeparatorList(g), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(*CountIdeals(g), 7);
}

TEST(LatticeSeparatorsTest, DiamondMiddleIsNot) {
  Graph g = MakeGraph(4, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  EXPECT_EQ(SeparatorList(g), (std::vector<int>{0, 3}));
  EXPECT_EQ(*CountIdeals(g), 6);  // {}, {0}, {0,1}, {0,2}, {0,1,2}, V
}

TEST(LatticeSeparatorsTest, TwoSourcesAndTwoSinks) {
  // 0, 1 -> 2 -> 3, 4: only 2 is comparable with everything.
  Graph g = MakeGraph(5, {{0, 2}, {1, 2}, {2, 3}, {2, 4}});
  EXPECT_EQ(SeparatorList(g), (std::vector<int>{2}));
  // Every node reaches 3; 0 and 2 are incomparable, so only 3 separates.
  Graph h = MakeGraph(4, {{0, 1}, {1, 3}, {0, 3}, {2, 3}});
  EXPECT_EQ(SeparatorList(h), (std::vector<int>{3}));
  // No edge spans node 1's position in the order 0, 1, 2, yet 2 is not
  // comparable with 0 or 1: nothing is a separator.
  Graph k = MakeGraph(3, {{0, 1}});
  EXPECT_EQ(SeparatorList(k), (std::vector<int>{}));
}

TEST(LatticeSeparatorsTest, MatchesTransitiveClosureAndIdealCount) {
  for (uint32_t seed = 0; seed < 300; ++seed) {
    RandomInstanceOptions o;
    o.nodes = 4 + seed % 9;
    RandomInstance inst = MakeRandomInstance(seed, o);
    const Graph& g = *inst.graph;
    EXPECT_EQ(SeparatorList(g), SlowSeparators(g)) << "seed " << seed;
    auto count = CountIdeals(g);
    ASSERT_TRUE(count.ok()) << count.status();
    EXPECT_EQ(*count, SlowCountIdeals(g)) << "seed " << seed;
  }
}

TEST(LatticeSeparatorsTest, LongParallelChainsUseWideMasks) {
  // src -> two chains of 40 -> sink: one segment of 80 nodes, 41^2 ideals
  // inside it, plus {} and V.
  std::vector<std::pair<int, int>> edges;
  const int n = 82;
  for (int c = 0; c < 2; ++c) {
    int prev = 0;
    for (int i = 0; i < 40; ++i) {
      const int v = 1 + c * 40 + i;
      edges.push_back({prev, v});
      prev = v;
    }
    edges.push_back({prev, n - 1});
  }
  Graph g = MakeGraph(n, edges);
  EXPECT_EQ(SeparatorList(g), (std::vector<int>{0, n - 1}));
  EXPECT_EQ(*CountIdeals(g), 41 * 41 + 2);
}

Graph WideGraph(int branches, int length) {
  std::vector<std::pair<int, int>> edges;
  const int n = branches * length + 2;
  for (int b = 0; b < branches; ++b) {
    int prev = 0;
    for (int i = 0; i < length; ++i) {
      const int v = 1 + b * length + i;
      edges.push_back({prev, v});
      prev = v;
    }
    edges.push_back({prev, n - 1});
  }
  return MakeGraph(n, edges);
}

TEST(LatticeDpTest, WideGraphDeclinesQuickly) {
  for (auto [branches, length] : {std::pair{40, 3}, std::pair{18, 3}, std::pair{12, 6}}) {
    Graph g = WideGraph(branches, length);
    ClusterSpec cs;
    for (int d = 0; d < 4; ++d) cs.devices.push_back({absl::StrCat("g", d), "h", 1e14, 1e12});
    Cluster cluster = *Cluster::Build(cs);
    CostModel cost(g, cluster, {});
    PartitionProblem p = PipelineProblem(cost, 4);
    auto r = MakeLatticeDpPartitioner()->Solve(p);
    // 4^18 and 7^12 ideals: both far past the 2M cap.
    EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
        << branches << "x" << length << ": " << r.status();
    EXPECT_NE(r.status().message().find("too many ideals"), std::string::npos);
  }
}

TEST(LatticeDpTest, NameAndBadStageCount) {
  auto solver = MakeLatticeDpPartitioner();
  EXPECT_EQ(solver->name(), "ideal_dp");
  RandomInstanceOptions o;
  o.nodes = 3;
  o.stages = 4;
  RandomInstance inst = MakeRandomInstance(1, o);
  EXPECT_EQ(solver->Solve(inst.problem).status().code(), absl::StatusCode::kInvalidArgument);
}

constexpr double kTol = 1e-6;

struct Combo {
  int nodes;
  int stages;
  bool chain;
  bool heterogeneous;

  RandomInstanceOptions Options(CommModel comm) const {
    RandomInstanceOptions o;
    o.nodes = nodes;
    o.stages = stages;
    o.chain = chain;
    o.heterogeneous = heterogeneous;
    o.comm = comm;
    return o;
  }
  std::string Describe(uint32_t seed) const {
    return absl::StrCat("seed ", seed, " nodes ", nodes, " stages ", stages, " chain ", chain,
                        " het ", heterogeneous);
  }
};

std::vector<Combo> Combos() {
  std::vector<Combo> out;
  for (int nodes : {6, 8, 10}) {
    for (int stages : {2, 3, 4}) {
      for (bool chain : {false, true}) {
        for (bool het : {false, true}) out.push_back({nodes, stages, chain, het});
      }
    }
  }
  return out;
}

// Seeds per combination; 10-node 4-stage brute force is the slow case.
int SeedsFor(const Combo& c) { return c.nodes == 10 && c.stages == 4 ? 6 : 14; }

TEST(LatticeDpTest, RelayIsOptimalWithLooseMemory) {
  auto solver = MakeLatticeDpPartitioner();
  int checked = 0;
  for (const Combo& c : Combos()) {
    for (int s = 0; s < SeedsFor(c); ++s) {
      const uint32_t seed = 1000 + s * 31 + c.nodes * 7 + c.stages;
      RandomInstance inst = MakeRandomInstance(seed, c.Options(CommModel::kRelay));
      auto brute = BruteForce(inst.problem);
      auto r = solver->Solve(inst.problem);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(r->fits_memory);
      const std::string where = c.Describe(seed);
      EXPECT_NEAR(r->objective, brute.best, kTol * brute.best) << where;
      EXPECT_LE(r->lower_bound, brute.best * (1 + 1e-12)) << where;
      EXPECT_GE(r->lower_bound, brute.best * (1 - kTol)) << where;
      // The reported objective is the exact evaluation of the split.
      auto again = MakePartition(inst.problem, r->stage_of_node);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_DOUBLE_EQ(again->objective, r->objective);
      EXPECT_GT(r->nodes_explored, 0);
      ++checked;
    }
  }
  EXPECT_GT(checked, 400);
}

TEST(LatticeDpTest, DirectBoundsBracketTheOptimum) {
  auto solver = MakeLatticeDpPartitioner();
  int checked = 0, optimal = 0;
  for (const Combo& c : Combos()) {
    for (int s = 0; s < SeedsFor(c); ++s) {
      const uint32_t seed = 5000 + s * 17 + c.nodes * 5 + c.stages;
      RandomInstance inst = MakeRandomInstance(seed, c.Options(CommModel::kDirect));
      auto brute = BruteForce(inst.problem);
      auto r = solver->Solve(inst.problem);
      ASSERT_TRUE(r.ok()) << r.status();
      const std::string where = c.Describe(seed);
      EXPECT_TRUE(r->fits_memory) << where;
      EXPECT_LE(r->lower_bound, brute.best * (1 + 1e-12)) << where;
      EXPECT_GE(r->objective, brute.best * (1 - 1e-12)) << where;
      EXPECT_GT(r->lower_bound, 0) << where;
      if (r->objective <= brute.best * (1 + kTol)) ++optimal;
      ++checked;
    }
  }
  EXPECT_GT(checked, 400);
  // The RELAY charge equals DIRECT on chains with uniform links, and the
  // exactly evaluated chains of both passes are usually optimal overall.
  EXPECT_GT(optimal, checked * 6 / 10) << optimal << " of " << checked;
}

// DIRECT on one host (uniform links, distinct devices) and loose memory: the
// pair DP is exact, so the objective is the brute-force optimum and the bound
// meets it. No free sources here (every node has work), so nothing is glued.
TEST(LatticeDpTest, DirectIsOptimalWithUniformLinks) {
  auto solver = MakeLatticeDpPartitioner();
  int checked = 0;
  for (int nodes : {5, 6, 7, 8, 9, 10}) {
    for (int stages : {2, 3, 4}) {
      for (bool chain : {false, true}) {
        const int seeds = nodes == 10 && stages == 4 ? 8 : (chain ? 8 : 20);
        for (int s = 0; s < seeds; ++s) {
          const uint32_t seed = 20000 + s * 13 + nodes * 101 + stages * 7 + chain;
          RandomInstanceOptions o;
          o.nodes = nodes;
          o.stages = stages;
          o.chain = chain;
          o.comm = CommModel::kDirect;
          RandomInstance inst = MakeRandomInstance(seed, o);
          auto brute = BruteForce(inst.problem);
          auto r = solver->Solve(inst.problem);
          ASSERT_TRUE(r.ok()) << r.status();
          const std::string where =
              absl::StrCat("seed ", seed, " nodes ", nodes, " stages ", stages, " chain ", chain);
          ASSERT_TRUE(r->fits_memory) << where;
          EXPECT_NEAR(r->objective, brute.best, kTol * brute.best) << where;
          EXPECT_LE(r->lower_bound, brute.best * (1 + 1e-12)) << where;
          EXPECT_GE(r->lower_bound, brute.best * (1 - kTol)) << where;
          EXPECT_NE(r->note.find("exact (DIRECT"), std::string::npos) << where << r->note;
          auto again = MakePartition(inst.problem, r->stage_of_node);
          ASSERT_TRUE(again.ok()) << again.status();
          EXPECT_DOUBLE_EQ(again->objective, r->objective);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 400);
}

// Random DAGs with fan-out, per-edge bytes (a tensor's edges differ, so the
// received bytes are the largest edge into the stage), uniform links and
// devices of different speeds: exact against brute force.
TEST(LatticeDpTest, DirectIsOptimalWithPerEdgeBytesAndMixedSpeeds) {
  auto solver = MakeLatticeDpPartitioner();
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int checked = 0;
  for (int s = 0; s < 300; ++s) {
    const int n = 5 + s % 6, stages = 2 + s % 3;
    GraphSpec spec;
    spec.name = "edges";
    for (int v = 0; v < n; ++v) {
      NodeSpec node;
      node.id = absl::StrCat("v", v);
      node.forward_flops = 1e12 * (0.05 + unit(rng));
      node.output_bytes = 1e8 * (0.05 + unit(rng));
      node.activation_bytes = 1e6;
      spec.nodes.push_back(node);
    }
    for (int v = 1; v < n; ++v) {
      const int fan_in = 1 + (unit(rng) < 0.5) + (unit(rng) < 0.2);
      for (int f = 0; f < fan_in; ++f) {
        const int a = static_cast<int>(unit(rng) * v);
        const double bytes = unit(rng) < 0.5 ? 0 : 1e8 * unit(rng);
        spec.edges.push_back({absl::StrCat("v", a), absl::StrCat("v", v), bytes});
      }
    }
    auto built = Graph::Build(std::move(spec));
    ASSERT_TRUE(built.ok()) << built.status();
    Graph g = std::move(*built);
    ClusterSpec cs;
    for (int d = 0; d < stages; ++d) {
      cs.devices.push_back({absl::StrCat("g", d), "h", 1e14 * (0.5 + unit(rng)), 1e12});
    }
    cs.intra_host_bandwidth = 1e10 * (0.2 + unit(rng));
    cs.intra_host_latency = 1e-3 * unit(rng);
    Cluster cluster = *Cluster::Build(cs);
    CostModel cost(g, cluster, {});
    PartitionProblem p = PipelineProblem(cost, stages);
    auto brute = BruteForce(p);
    auto r = solver->Solve(p);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->fits_memory);
    EXPECT_NEAR(r->objective, brute.best, kTol * brute.best) << "case " << s;
    EXPECT_LE(r->lower_bound, brute.best * (1 + 1e-12)) << "case " << s;
    EXPECT_GE(r->lower_bound, brute.best * (1 - kTol)) << "case " << s;
    ++checked;
  }
  EXPECT_EQ(checked, 300);
}

// Heterogeneous links (two hosts): the pair DP charges the fastest possible
// link, so its value is a bound; the split is still evaluated exactly.
TEST(LatticeDpTest, DirectBoundHoldsWithHeterogeneousLinks) {
  auto solver = MakeLatticeDpPartitioner();
  int checked = 0, optimal = 0;
  for (int s = 0; s < 200; ++s) {
    RandomInstanceOptions o;
    o.nodes = 5 + s % 6;
    o.stages = 2 + s % 3;
    o.chain = s % 5 == 0;
    o.heterogeneous = true;
    o.comm = CommModel::kDirect;
    const uint32_t seed = 40000 + s;
    RandomInstance inst = MakeRandomInstance(seed, o);
    auto brute = BruteForce(inst.problem);
    auto r = solver->Solve(inst.problem);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(r->lower_bound, brute.best * (1 + 1e-12)) << "seed " << seed;
    EXPECT_GE(r->objective, brute.best * (1 - 1e-12)) << "seed " << seed;
    if (r->objective <= brute.best * (1 + kTol)) ++optimal;
    ++checked;
  }
  // The slowest-link pass finds the optimum on about 4 in 5 (the
  // fastest-link pass alone on about 3 in 4).
  EXPECT_GT(optimal, checked * 3 / 4) << optimal << " of " << checked;
}

// A residual block: x -> conv1 -> conv2 -> add(x, conv2) -> head. A stage
// starting at conv2 must receive both conv1's output and the residual x; the
// bound has to count it, and with it the two-stage optimum is found exactly.
TEST(LatticeDpTest, ResidualTensorIsCharged) {
  GraphSpec spec;
  spec.name = "residual";
  const std::vector<std::pair<std::string, double>> nodes = {
      {"x", 1e12}, {"conv1", 1e12}, {"conv2", 1e12}, {"add", 1e11}, {"head", 1e12}};
  for (auto& [id, flops] : nodes) {
    NodeSpec node;
    node.id = id;
    node.forward_flops = flops;
    node.output_bytes = 4e8;
    spec.nodes.push_back(node);
  }
  for (auto [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"x", "conv1"}, {"conv1", "conv2"}, {"conv2", "add"}, {"x", "add"}, {"add", "head"}}) {
    spec.edges.push_back({a, b, 0});
  }
  Graph g = *Graph::Build(std::move(spec));
  ClusterSpec cs;
  for (int d = 0; d < 2; ++d) cs.devices.push_back({absl::StrCat("g", d), "h", 1e14, 1e12});
  cs.intra_host_bandwidth = 1e10;
  cs.intra_host_latency = 0;
  Cluster cluster = *Cluster::Build(cs);
  CostModel cost(g, cluster, {});
  PartitionProblem p = PipelineProblem(cost, 2);
  auto brute = BruteForce(p);
  auto r = MakeLatticeDpPartitioner()->Solve(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->objective, brute.best, kTol * brute.best);
  EXPECT_GE(r->lower_bound, brute.best * (1 - kTol)) << r->note;
  EXPECT_LE(r->lower_bound, brute.best * (1 + 1e-12));
  // Cutting after conv1 ({x, conv1} | {conv2, add, head}) moves two tensors
  // (x and conv1's output): 2 tensors x 2 directions x (0.04 s + the 5 us
  // default latency) on each side.
  std::vector<int> after_conv1(5, 1);
  after_conv1[*g.FindNode("x")] = 0;
  after_conv1[*g.FindNode("conv1")] = 0;
  auto split = MakePartition(p, after_conv1);
  ASSERT_TRUE(split.ok());
  EXPECT_NEAR(split->stages[1].comm_seconds(), 4 * (0.04 + 5e-6), 1e-9);
  EXPECT_GE(split->objective, r->lower_bound);
}

TEST(LatticeDpTest, LowerBoundValidForEveryOptionCombination) {
  auto solver = MakeLatticeDpPartitioner();
  int fits = 0, infeasible = 0, declined_wrongly = 0, total = 0;
  for (int mask = 0; mask < 16; ++mask) {
    for (int s = 0; s < 12; ++s) {
      const uint32_t seed = 9000 + mask * 101 + s;
      RandomInstanceOptions o;
      o.nodes = 6 + s % 4;
      o.stages = 2 + s % 3;
      o.chain = mask & 1;
      o.heterogeneous = mask & 2;
      o.tight_memory = mask & 4;
      o.tied_params = mask & 8;
      for (CommModel comm : {CommModel::kRelay, CommModel::kDirect}) {
        o.comm = comm;
        RandomInstance inst = MakeRandomInstance(seed, o);
        auto brute = BruteForce(inst.problem);
        auto r = solver->Solve(inst.problem);
        const std::string where =
            absl::StrCat("seed ", seed, " mask ", mask, " relay ", comm == CommModel::kRelay);
        ++total;
        if (!r.ok()) {
          // Only a proof that nothing fits may refuse.
          EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << where;
          EXPECT_TRUE(std::isinf(brute.best)) << where << " brute " << brute.best;
          ++infeasible;
          continue;
        }
        auto again = MakePartition(inst.problem, r->stage_of_node);
        ASSERT_TRUE(again.ok()) << where << again.status();
        EXPECT_DOUBLE_EQ(again->objective, r->objective) << where;
        EXPECT_EQ(again->fits_memory, r->fits_memory) << where;
        EXPECT_LE(r->lower_bound, r->objective) << where;
        if (!std::isinf(brute.best)) {
          EXPECT_LE(r->lower_bound, brute.best * (1 + 1e-12)) << where;
        }
        if (r->fits_memory) {
          ++fits;
          EXPECT_GE(r->objective, brute.best * (1 - 1e-12)) << where;
        } else if (!std::isinf(brute.best)) {
          ++declined_wrongly;  // a fitting split exists but was not found
        }
      }
    }
  }
  // The memory search is a heuristic for finite T; it must find a fitting
  // split in the clear majority of the instances that have one.
  EXPECT_LE(declined_wrongly, total / 20) << declined_wrongly << " of " << total << " (fits "
                                          << fits << ", infeasible " << infeasible << ")";
}

// Zero-work sources (buffers, labels) and a cheap op hanging off one are
// glued to their consumer; the bound must stay valid for every split,
// including those that put them elsewhere or alone in a stage.
TEST(LatticeDpTest, GluedFreeSourcesKeepTheBoundValid) {
  auto solver = MakeLatticeDpPartitioner();
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int near_optimal = 0, total = 0;
  for (int s = 0; s < 120; ++s) {
    const int body = 5 + s % 3, extra = 1 + s % 3, stages = 2 + s % 3;
    GraphSpec spec;
    spec.name = "free";
    for (int v = 0; v < body + extra + 1; ++v) {
      NodeSpec node;
      node.id = absl::StrCat("v", v);
      node.output_bytes = 1e8 * (0.05 + unit(rng));
      node.activation_bytes = 1e8 * unit(rng);
      if (v < body) node.forward_flops = 1e12 * (0.05 + unit(rng));
      if (v == body + extra) node.forward_flops = 1e6;  // a mask op on a free source
      spec.nodes.push_back(node);
    }
    for (int v = 1; v < body; ++v) {
      spec.edges.push_back(
          {absl::StrCat("v", v - 1 - (unit(rng) < 0.3 && v > 1)), absl::StrCat("v", v), 0});
    }
    for (int x = 0; x < extra; ++x) {
      const int consumer = static_cast<int>(unit(rng) * body);
      spec.edges.push_back({absl::StrCat("v", body + x), absl::StrCat("v", consumer), 0});
    }
    spec.edges.push_back({absl::StrCat("v", body), absl::StrCat("v", body + extra), 0});
    spec.edges.push_back({absl::StrCat("v", body + extra), absl::StrCat("v", body - 1), 0});
    Graph g = *Graph::Build(std::move(spec));
    ClusterSpec cs;
    for (int d = 0; d < stages; ++d) {
      cs.devices.push_back(
          {absl::StrCat("g", d), absl::StrCat("h", d / 2), 1e14 * (0.5 + unit(rng)), 1e12});
    }
    cs.intra_host_bandwidth = 1e10;
    cs.inter_host_bandwidth = 2e9;
    Cluster cluster = *Cluster::Build(cs);
    for (CommModel comm : {CommModel::kRelay, CommModel::kDirect}) {
      CostOptions co;
      co.comm_model = comm;
      CostModel cost(g, cluster, co);
      PartitionProblem p = PipelineProblem(cost, stages);
      auto brute = BruteForce(p);
      auto r = solver->Solve(p);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(MakePartition(p, r->stage_of_node).ok());
      EXPECT_LE(r->lower_bound, brute.best * (1 + 1e-12)) << "case " << s;
      EXPECT_GE(r->objective, brute.best * (1 - 1e-12)) << "case " << s;
      ++total;
      if (r->objective <= brute.best * (1 + 1e-3)) ++near_optimal;
    }
  }
  // Gluing forbids placing a free source away from its consumer, which can
  // cost optimality on these tiny graphs with heavy source tensors.
  EXPECT_GT(near_optimal, total * 2 / 3) << near_optimal << " of " << total;
}

TEST(LatticeDpTest, StopsAtDeadlineWithValidSplit) {
  RandomInstanceOptions o;
  o.nodes = 10;
  o.stages = 3;
  o.comm = CommModel::kDirect;
  RandomInstance inst = MakeRandomInstance(77, o);
  inst.problem.deadline = absl::Now() - absl::Seconds(1);
  auto r = MakeLatticeDpPartitioner()->Solve(inst.problem);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(MakePartition(inst.problem, r->stage_of_node).ok());
  EXPECT_LE(r->lower_bound, BruteForce(inst.problem).best);
}

// The clamped rounds, the clamps raised at each cut and the separable skips
// leave the pair DP's optima unchanged: compare with the plain recursion on
// random instances (free sources glued or not, uniform or mixed links, both
// link modes).
TEST(LatticeDpTest, PairDpPruningKeepsTheOptimum) {
  int64_t pruned_pairs = 0, plain_pairs = 0;
  for (int s = 0; s < 240; ++s) {
    RandomInstanceOptions o;
    o.nodes = 6 + s % 7;
    o.stages = 2 + s % 4;
    o.chain = s % 6 == 0;
    o.heterogeneous = s % 2 == 1;
    o.comm = CommModel::kDirect;
    const uint32_t seed = 70000 + s;
    RandomInstance inst = MakeRandomInstance(seed, o);
    for (bool slowest : {false, true}) {
      auto pruned = DirectPairOptimum(inst.problem, true, slowest);
      auto plain = DirectPairOptimum(inst.problem, false, slowest);
      ASSERT_TRUE(pruned.ok()) << pruned.status();
      ASSERT_TRUE(plain.ok()) << plain.status();
      const std::string what = absl::StrCat("seed ", seed, slowest ? " slowest" : " fastest");
      EXPECT_NEAR(pruned->value, plain->value, 1e-9 * plain->value) << what;
      EXPECT_NEAR(pruned->bound, plain->bound, 1e-9 * plain->bound) << what;
      pruned_pairs += pruned->pairs;
      plain_pairs += plain->pairs;
    }
  }
  // Small graphs save little; the clamped rounds must not cost much more.
  EXPECT_LT(pruned_pairs, 2 * plain_pairs);
}

// Per split, the fastest-link pair charge is at most the exact objective and
// the slowest-link charge at least: so the first pass bounds every split and
// the second finds a split no worse than its value. The solver reports both
// passes when stage links differ, and its result brackets the brute-force
// optimum.
TEST(LatticeDpTest, DirectHeterogeneousPassesBracketTheSplit) {
  auto solver = MakeLatticeDpPartitioner();
  int both_passes = 0;
  for (int s = 0; s < 200; ++s) {
    RandomInstanceOptions o;
    o.nodes = 5 + s % 7;
    o.stages = 2 + s % 4;
    o.chain = s % 5 == 0;
    o.heterogeneous = true;
    o.comm = CommModel::kDirect;
    const uint32_t seed = 90000 + s;
    RandomInstance inst = MakeRandomInstance(seed, o);
    const std::string what = absl::StrCat("seed ", seed);
    auto fastest = DirectPairOptimum(inst.problem, true, false);
    auto slowest = DirectPairOptimum(inst.problem, true, true);
    ASSERT_TRUE(fastest.ok()) << fastest.status();
    ASSERT_TRUE(slowest.ok()) << slowest.status();
    ASSERT_FALSE(fastest->stage_of_node.empty()) << what;
    ASSERT_FALSE(slowest->stage_of_node.empty()) << what;
    auto pf = MakePartition(inst.problem, fastest->stage_of_node);
    auto ps = MakePartition(inst.problem, slowest->stage_of_node);
    ASSERT_TRUE(pf.ok()) << pf.status();
    ASSERT_TRUE(ps.ok()) << ps.status();
    EXPECT_GE(pf->objective, fastest->value * (1 - 1e-9)) << what;
    EXPECT_LE(ps->objective, slowest->value * (1 + 1e-9)) << what;
    EXPECT_LE(fastest->value, slowest->value * (1 + 1e-9)) << what;

    auto brute = BruteForce(inst.problem);
    auto r = solver->Solve(inst.problem);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(r->lower_bound, brute.best * (1 + 1e-12)) << what;
    EXPECT_GE(r->objective, brute.best * (1 - 1e-12)) << what;
    if (r->note.find("slowest-link pass") != std::string::npos) ++both_passes;
  }
  EXPECT_GT(both_passes, 0);
}

// A graph whose ideals run into the millions stops enumerating them at the
// deadline or on cancellation instead of building the lattice first.
TEST(LatticeDpTest, IdealEnumerationStopsAtDeadlineAndOnCancel) {
  Graph g = WideGraph(12, 6);  // 7^12 ideals: enumerated until the 2M cap
  ClusterSpec cs;
  for (int d = 0; d < 4; ++d) cs.devices.push_back({absl::StrCat("g", d), "h", 1e14, 1e12});
  Cluster cluster = *Cluster::Build(cs);
  CostModel cost(g, cluster, {});
  PartitionProblem p = PipelineProblem(cost, 4);
  // The code tells which stop it took: enumerating to the cap would answer
  // RESOURCE_EXHAUSTED ("too many ideals"), not DEADLINE_EXCEEDED.
  p.deadline = absl::Now() + absl::Milliseconds(20);
  auto r = MakeLatticeDpPartitioner()->Solve(p);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();

  std::atomic<bool> cancelled{true};
  p.deadline = absl::InfiniteFuture();
  p.cancelled = &cancelled;
  r = MakeLatticeDpPartitioner()->Solve(p);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
}

}  // namespace
}  // namespace pipeplan
