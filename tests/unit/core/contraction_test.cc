#include "../../../planner_service/core/partition/contraction.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "brute_force.h"
#include "gtest/gtest.h"

namespace pipeplan {
namespace {

using ::pipeplan::testing::BruteForce;
using ::pipeplan::testing::MakeInstance;
using ::pipeplan::testing::MakeRandomInstance;
using ::pipeplan::testing::RandomInstance;
using ::pipeplan::testing::RandomInstanceOptions;

bool Acyclic(int n, const std::vector<std::pair<int, int>>& edges) {
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> out(n);
  for (auto [a, b] : edges) {
    out[a].push_back(b);
    ++indeg[b];
  }
  std::vector<int> q;
  for (int v = 0; v < n; ++v)
    if (indeg[v] == 0) q.push_back(v);
  int seen = 0;
  while (!q.empty()) {
    const int v = q.back();
    q.pop_back();
    ++seen;
    for (int w : out[v])
      if (--indeg[w] == 0) q.push_back(w);
  }
  return seen == n;
}

TEST(ContractionTest, LossyMergeSumsMappingAndAcyclicity) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    RandomInstanceOptions o;
    o.nodes = 60;
    o.stages = 4;
    o.tied_params = true;
    RandomInstance inst = MakeRandomInstance(seed, o);
    const Graph& g = *inst.graph;
    ContractionOptions opt;
    opt.target_super_nodes = 20;
    const Contraction c = Contract(inst.problem, opt);
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    EXPECT_TRUE(c.lossy);
    EXPECT_GE(c.num_super, 1);
    EXPECT_LT(c.num_super, g.num_nodes());
    EXPECT_TRUE(Acyclic(c.num_super, c.edges));
    // Every node in exactly one super-node; sums are right.
    std::vector<int> count(g.num_nodes(), 0);
    for (int s = 0; s < c.num_super; ++s) {
      double work = 0, act = 0;
      std::vector<int> groups;
      for (int v : c.members[s]) {
        ++count[v];
        EXPECT_EQ(c.super_of_node[v], s);
        work += inst.cost->work_ref(v);
        act += inst.cost->activation_bytes(v);
        if (g.param_group(v) >= 0) groups.push_back(g.param_group(v));
      }
      std::sort(groups.begin(), groups.end());
      groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
      EXPECT_NEAR(c.work_ref[s], work, 1e-12 * work);
      EXPECT_NEAR(c.activation_bytes[s], act, 1e-9 * act + 1e-9);
      EXPECT_EQ(c.param_groups[s], groups);
    }
    for (int v = 0; v < g.num_nodes(); ++v) EXPECT_EQ(count[v], 1);
    // Any super-node split expands into a valid node split (edges forward):
    // stages by a topological order of the super-node DAG.
    std::vector<int> indeg(c.num_super, 0), order;
    for (auto [a, b] : c.edges) ++indeg[b];
    std::vector<int> q;
    for (int s = 0; s < c.num_super; ++s)
      if (indeg[s] == 0) q.push_back(s);
    while (!q.empty()) {
      const int s = q.back();
      q.pop_back();
      order.push_back(s);
      for (auto [a, b] : c.edges)
        if (a == s && --indeg[b] == 0) q.push_back(b);
    }
    std::vector<int> stage_of_super(c.num_super);
    for (int i = 0; i < c.num_super; ++i) stage_of_super[order[i]] = i * 4 / c.num_super;
    const std::vector<int> stage = c.Expand(stage_of_super);
    EXPECT_TRUE(inst.cost->Evaluate(stage, inst.problem.stage_device).ok());
    std::vector<int> back;
    ASSERT_TRUE(c.Restrict(stage, &back));
    EXPECT_EQ(back, stage_of_super);
  }
}

TEST(ContractionTest, KeepCutsStayRepresentable) {
  RandomInstanceOptions o;
  o.nodes = 80;
  o.stages = 5;
  RandomInstance inst = MakeRandomInstance(3, o);
  const auto dp = MakeChainDpPartitioner()->Solve(inst.problem);
  ASSERT_TRUE(dp.ok());
  ContractionOptions opt;
  opt.target_super_nodes = 10;
  opt.keep_cuts = dp->stage_of_node;
  const Contraction c = Contract(inst.problem, opt);
  std::vector<int> s;
  EXPECT_TRUE(c.Restrict(dp->stage_of_node, &s));
  EXPECT_EQ(c.Expand(s), dp->stage_of_node);
}

// Small DAGs with free sources (no in-edges, zero work, zero memory, one
// consumer) in front of random nodes.
RandomInstance MakeFreeSourceInstance(uint32_t seed, int work_nodes, int sources, int k,
                                      CommModel comm) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  GraphSpec spec;
  for (int v = 0; v < work_nodes; ++v) {
    NodeSpec n;
    n.id = absl::StrCat("n", v);
    n.forward_flops = 1e12 * (0.05 + unit(rng));
    n.param_bytes = 1e9 * unit(rng);
    n.output_bytes = 1e8 * (0.05 + unit(rng));
    spec.nodes.push_back(n);
    if (v > 0) {
      spec.edges.push_back(
          {absl::StrCat("n", std::max(0, v - 1 - static_cast<int>(unit(rng) * 2))), n.id, 0});
    }
  }
  for (int i = 0; i < sources; ++i) {
    NodeSpec n;
    n.id = absl::StrCat("src", i);
    spec.nodes.push_back(n);  // zero work, zero bytes
    const int c = static_cast<int>(unit(rng) * work_nodes);
    spec.edges.push_back({n.id, absl::StrCat("n", c), 1e8 * unit(rng)});
  }
  ClusterSpec cs;
  for (int d = 0; d < k; ++d) {
    cs.devices.push_back({absl::StrCat("gpu", d), absl::StrCat("h", d / 2),
                          1e14 * (0.5 + unit(rng)), unit(rng) < 0.5 ? 6e9 : 1e12});
  }
  cs.intra_host_bandwidth = 1e10;
  cs.inter_host_bandwidth = 2e9;
  CostOptions co;
  co.comm_model = comm;
  return MakeInstance(std::move(spec), std::move(cs), co);
}

// Best split constant on super-nodes, by enumeration.
double BestContracted(const PartitionProblem& p, const Contraction& c) {
  const int k = p.num_stages();
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> st(c.num_super, 0);
  std::function<void(int)> rec = [&](int i) {
    if (i == c.num_super) {
      auto part = MakePartition(p, c.Expand(st));
      if (part.ok() && part->fits_memory) best = std::min(best, part->objective);
      return;
    }
    for (int s = 0; s < k; ++s) {
      st[i] = s;
      rec(i + 1);
    }
  };
  rec(0);
  return best;
}

TEST(ContractionTest, FreeSourceMergeIsExactForTheBound) {
  int merged = 0, equal = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    const int k = 2 + seed % 3;
    RandomInstance inst = MakeFreeSourceInstance(seed, 5 + seed % 2, 2, k,
                                                 seed % 2 ? CommModel::kRelay : CommModel::kDirect);
    const Contraction c = Contract(inst.problem, ContractionOptions{});
    EXPECT_FALSE(c.lossy);
    if (!c.merged_free_sources) continue;
    ++merged;
    EXPECT_EQ(c.num_super, inst.graph->num_nodes() - 2);
    const double orig = BruteForce(inst.problem).best;
    const double contracted = BestContracted(inst.problem, c);
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    if (std::isinf(orig)) {
      EXPECT_TRUE(std::isinf(contracted));
      continue;
    }
    EXPECT_GE(contracted, orig * (1 - 1e-12));
    // The documented bound: min(contracted optimum, fallback) <= optimum.
    EXPECT_LE(std::min(contracted, FreeSourceFallbackBound(inst.problem)), orig * (1 + 1e-12));
    equal += std::abs(contracted - orig) <= 1e-12 * orig;
  }
  EXPECT_GT(merged, 30);
  EXPECT_GT(equal, merged / 2);
}

TEST(ContractionTest, MilpMatchesBruteForceWithFreeSources) {
  auto milp = MakeMilpPartitioner();
  for (uint32_t seed = 0; seed < 30; ++seed) {
    const int k = 2 + seed % 3;
    RandomInstance inst = MakeFreeSourceInstance(100 + seed, 5, 2, k,
                                                 seed % 2 ? CommModel::kRelay : CommModel::kDirect);
    inst.problem.relative_gap = 0;
    const auto bf = BruteForce(inst.problem);
    const auto p = milp->Solve(inst.problem);
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    if (std::isinf(bf.best)) {
      EXPECT_FALSE(p.ok());
      continue;
    }
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_LE(p->lower_bound, bf.best * (1 + 1e-9));
    EXPECT_GE(p->objective, bf.best * (1 - 1e-9));
  }
}

}  // namespace
}  // namespace pipeplan
