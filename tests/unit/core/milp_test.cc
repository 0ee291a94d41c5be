#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "brute_force.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/core/partition.h"

namespace pipeplan {
namespace {

using ::pipeplan::testing::BruteForce;
using ::pipeplan::testing::MakeRandomInstance;
using ::pipeplan::testing::RandomInstance;
using ::pipeplan::testing::RandomInstanceOptions;

RandomInstanceOptions SmallOptions(uint32_t seed) {
  RandomInstanceOptions o;
  o.nodes = 6 + seed % 4;
  o.stages = 2 + (seed / 4) % 3;
  o.comm = (seed / 2) % 2 ? CommModel::kRelay : CommModel::kDirect;
  o.heterogeneous = seed % 3 != 0;
  o.tight_memory = seed % 5 < 3;
  o.tied_params = seed % 2 == 0;
  return o;
}

TEST(MilpTest, MatchesBruteForceOnSmallDags) {
  auto milp = MakeMilpPartitioner();
  int solved = 0, infeasible = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    const RandomInstanceOptions o = SmallOptions(seed);
    RandomInstance inst = MakeRandomInstance(seed, o);
    inst.problem.relative_gap = 0;
    const auto bf = BruteForce(inst.problem);
    const auto p = milp->Solve(inst.problem);
    SCOPED_TRACE(absl::StrCat("seed ", seed, " nodes ", o.nodes, " stages ", o.stages,
                              o.comm == CommModel::kRelay ? " relay" : " direct"));
    if (std::isinf(bf.best)) {
      EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->fits_memory);
    const double eps = 1e-9 * bf.best;
    EXPECT_LE(p->lower_bound, bf.best + eps);
    EXPECT_GE(p->objective, bf.best - eps);
    // The instances' links never get faster further away, so the model is
    // exact and CBC closes the gap.
    EXPECT_LE(p->objective - p->lower_bound, 1e-7 * p->objective) << p->note;
    if (p->objective - p->lower_bound <= 1e-7 * p->objective) {
      EXPECT_NEAR(p->objective, bf.best, eps) << p->note;
      ++solved;
    }
  }
  EXPECT_GT(solved, 150);
  EXPECT_GT(infeasible, 0);
}

// With no time for CBC the reported bound comes from the balance, the chain
// DP and the communication bound alone; it must never exceed the optimum.
TEST(MilpTest, BoundsWithoutCbcAreValid) {
  auto milp = MakeMilpPartitioner();
  int above_balance = 0, checked = 0;
  for (uint32_t seed = 0; seed < 400; ++seed) {
    RandomInstanceOptions o = SmallOptions(seed);
    o.stages = 2 + seed % 4;
    o.chain = seed % 7 == 0;
    RandomInstance inst = MakeRandomInstance(5000 + seed, o);
    if (o.stages > o.nodes) continue;
    const auto bf = BruteForce(inst.problem);
    if (std::isinf(bf.best)) continue;
    inst.problem.deadline = absl::Now();  // already expired: no CBC
    const auto p = milp->Solve(inst.problem);
    if (!p.ok()) continue;  // the chain DP may find nothing that fits
    SCOPED_TRACE(absl::StrCat("seed ", seed, " ", p->note));
    ++checked;
    EXPECT_LE(p->lower_bound, bf.best * (1 + 1e-9));
    EXPECT_GE(p->objective, bf.best * (1 - 1e-9));
    if (p->lower_bound > BalanceLowerBound(inst.problem) * (1 + 1e-6)) ++above_balance;
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(above_balance, 0);
}

TEST(MilpTest, NeverWorseThanChainDpOnDags) {
  auto milp = MakeMilpPartitioner();
  auto dp = MakeChainDpPartitioner();
  for (uint32_t seed = 0; seed < 8; ++seed) {
    RandomInstanceOptions o;
    o.nodes = 40;
    o.stages = 3 + seed % 3;
    o.comm = seed % 2 ? CommModel::kRelay : CommModel::kDirect;
    o.heterogeneous = seed % 4 < 2;
    RandomInstance inst = MakeRandomInstance(1000 + seed, o);
    inst.problem.deadline = absl::Now() + absl::Seconds(10);
    const auto d = dp->Solve(inst.problem);
    ASSERT_TRUE(d.ok()) << d.status();
    const auto m = milp->Solve(inst.problem);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_LE(m->objective, d->objective * (1 + 1e-12)) << "seed " << seed;
    EXPECT_LE(m->lower_bound, m->objective);
  }
}

TEST(MilpTest, ImprovesOnGivenWarmStart) {
  RandomInstanceOptions o;
  o.nodes = 30;
  o.stages = 4;
  RandomInstance inst = MakeRandomInstance(77, o);
  // A poor but valid warm start: topological order cut by node count.
  const Graph& g = *inst.graph;
  std::vector<int> warm(g.num_nodes());
  for (int i = 0; i < g.num_nodes(); ++i) warm[g.topo_order()[i]] = i * 4 / g.num_nodes();
  auto warm_p = MakePartition(inst.problem, warm);
  ASSERT_TRUE(warm_p.ok());
  inst.problem.warm_start = warm;
  inst.problem.deadline = absl::Now() + absl::Seconds(10);
  const auto m = MakeMilpPartitioner()->Solve(inst.problem);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_LE(m->objective, warm_p->objective);
}

TEST(MilpTest, HonoursDeadline) {
  RandomInstanceOptions o;
  o.nodes = 300;
  o.stages = 8;
  o.heterogeneous = true;
  RandomInstance inst = MakeRandomInstance(5, o);
  const absl::Time start = absl::Now();
  inst.problem.deadline = start + absl::Milliseconds(200);
  const auto m = MakeMilpPartitioner()->Solve(inst.problem);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_LT(seconds, 2.0);
  ASSERT_TRUE(m.ok()) << m.status();
  auto check = MakePartition(inst.problem, m->stage_of_node);
  ASSERT_TRUE(check.ok());
  EXPECT_DOUBLE_EQ(check->objective, m->objective);
  EXPECT_LE(m->lower_bound, m->objective);
  std::printf("deadline 0.2s, 300 nodes x 8 stages: %.3fs, gap %.3g, %s\n", seconds,
              (m->objective - m->lower_bound) / m->objective, m->note.c_str());
}

TEST(MilpTest, CancellationStopsTheSolve) {
  RandomInstanceOptions o;
  o.nodes = 300;
  o.stages = 8;
  o.heterogeneous = true;
  o.comm = CommModel::kRelay;
  RandomInstance inst = MakeRandomInstance(6, o);
  inst.problem.relative_gap = 0;
  std::atomic<bool> cancelled{false};
  inst.problem.cancelled = &cancelled;
  const absl::Time start = absl::Now();
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancelled = true;
  });
  const auto m = MakeMilpPartitioner()->Solve(inst.problem);
  canceller.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_LT(seconds, 3.0);
  // Either the incumbent (from the DP warm start) or CANCELLED.
  if (m.ok()) {
    EXPECT_TRUE(MakePartition(inst.problem, m->stage_of_node).ok());
  } else {
    EXPECT_EQ(m.status().code(), absl::StatusCode::kCancelled);
  }
}

TEST(MilpTest, InfeasibleMemoryNamesTheBytesNeeded) {
  RandomInstanceOptions o;
  o.nodes = 8;
  o.stages = 3;
  RandomInstance inst = MakeRandomInstance(11, o);
  ClusterSpec cs;
  for (int d = 0; d < 3; ++d) cs.devices.push_back({absl::StrCat("gpu", d), "h", 1e14, 1e8});
  inst.cluster = std::make_unique<Cluster>(*Cluster::Build(cs));
  inst.cost = std::make_unique<CostModel>(*inst.graph, *inst.cluster, inst.cost->options());
  inst.problem.cost = inst.cost.get();
  const auto m = MakeMilpPartitioner()->Solve(inst.problem);
  ASSERT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition) << m.status();
  EXPECT_THAT(std::string(m.status().message()), ::testing::HasSubstr("bytes"));
}

// --- ResNet-50 measurement -------------------------------------------------

// A minimal JSON reader for the test data files (objects, arrays, strings,
// numbers, literals).
struct Json {
  std::variant<std::nullptr_t, bool, double, std::string, std::vector<Json>,
               std::map<std::string, Json>>
      v;
  const Json* get(const std::string& key) const {
    const auto* m = std::get_if<std::map<std::string, Json>>(&v);
    if (!m) return nullptr;
    auto it = m->find(key);
    return it == m->end() ? nullptr : &it->second;
  }
  double num(const std::string& key, double dflt = 0) const {
    const Json* j = get(key);
    return j && std::holds_alternative<double>(j->v) ? std::get<double>(j->v) : dflt;
  }
  std::string str(const std::string& key) const {
    const Json* j = get(key);
    return j && std::holds_alternative<std::string>(j->v) ? std::get<std::string>(j->v) : "";
  }
  const std::vector<Json>& arr(const std::string& key) const {
    static const std::vector<Json> empty;
    const Json* j = get(key);
    return j && std::holds_alternative<std::vector<Json>>(j->v) ? std::get<std::vector<Json>>(j->v)
                                                                : empty;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}
  Json Parse() {
    Ws();
    Json j;
    const char c = s_[i_];
    if (c == '{') {
      std::map<std::string, Json> m;
      ++i_;
      Ws();
      while (s_[i_] != '}') {
        std::string key = Str();
        Ws();
        ++i_;  // ':'
        m[key] = Parse();
        Ws();
        if (s_[i_] == ',') ++i_;
        Ws();
      }
      ++i_;
      j.v = std::move(m);
    } else if (c == '[') {
      std::vector<Json> a;
      ++i_;
      Ws();
      while (s_[i_] != ']') {
        a.push_back(Parse());
        Ws();
        if (s_[i_] == ',') ++i_;
        Ws();
      }
      ++i_;
      j.v = std::move(a);
    } else if (c == '"') {
      j.v = Str();
    } else if (s_.compare(i_, 4, "true") == 0) {
      i_ += 4;
      j.v = true;
    } else if (s_.compare(i_, 5, "false") == 0) {
      i_ += 5;
      j.v = false;
    } else if (s_.compare(i_, 4, "null") == 0) {
      i_ += 4;
    } else {
      size_t used = 0;
      j.v = std::stod(s_.substr(i_, 40), &used);
      i_ += used;
    }
    return j;
  }

 private:
  void Ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  std::string Str() {
    std::string out;
    ++i_;
    while (s_[i_] != '"') {
      if (s_[i_] == '\\') ++i_;
      out += s_[i_++];
    }
    ++i_;
    return out;
  }
  const std::string& s_;
  size_t i_ = 0;
};

std::string DataPath(const std::string& file) {
  const char* dir = std::getenv("PIPEPLAN_TEST_DATA");
  return std::string(dir ? dir : "tests/data") + "/" + file;
}

std::optional<Json> ReadJson(const std::string& file) {
  std::ifstream in(DataPath(file));
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  return JsonParser(text).Parse();
}

GraphSpec GraphFromJson(const Json& j) {
  GraphSpec spec;
  spec.name = j.str("name");
  spec.batch_size = j.num("batch_size");
  for (const Json& n : j.arr("nodes")) {
    NodeSpec node;
    node.id = n.str("id");
    node.op = n.str("op");
    node.forward_flops = n.num("forward_flops");
    node.backward_flops = n.num("backward_flops");
    node.param_bytes = n.num("param_bytes");
    node.activation_bytes = n.num("activation_bytes");
    node.output_bytes = n.num("output_bytes");
    node.param_key = n.str("param_key");
    node.weight_grad_fraction = n.num("weight_grad_fraction");
    spec.nodes.push_back(node);
  }
  for (const Json& e : j.arr("edges"))
    spec.edges.push_back({e.str("src"), e.str("dst"), e.num("bytes")});
  return spec;
}

// A ResNet-like DAG (stem, 16 bottleneck blocks with skip connections, head)
// when the data file is absent.
GraphSpec ResNetLike() {
  GraphSpec spec;
  spec.name = "resnet_like";
  auto add = [&](const std::string& id, double flops, double params, double out) {
    NodeSpec n;
    n.id = id;
    n.forward_flops = flops;
    n.param_bytes = params;
    n.output_bytes = out;
    spec.nodes.push_back(n);
  };
  add("x", 0, 0, 2e7);
  add("stem", 7.5e9, 4e4, 1e8);
  spec.edges.push_back({"x", "stem", 0});
  std::string prev = "stem";
  int blocks[] = {3, 4, 6, 3};
  double width = 1;
  for (int s = 0; s < 4; ++s, width *= 2) {
    for (int b = 0; b < blocks[s]; ++b) {
      const std::string p = absl::StrCat("l", s, ".", b, ".");
      add(p + "c1", 8e8 * width, 6e4 * width * width, 2.5e7 / width);
      add(p + "c2", 7.4e9 / width * width, 6e5 * width * width, 2.5e7 / width);
      add(p + "c3", 8e8 * width, 2.4e5 * width * width, 1e8 / width);
      add(p + "add", 2.5e7, 0, 1e8 / width);
      spec.edges.push_back({prev, p + "c1", 0});
      spec.edges.push_back({p + "c1", p + "c2", 0});
      spec.edges.push_back({p + "c2", p + "c3", 0});
      spec.edges.push_back({p + "c3", p + "add", 0});
      spec.edges.push_back({prev, p + "add", 0});
      prev = p + "add";
    }
  }
  add("fc", 4e6, 8e6, 4e3);
  spec.edges.push_back({prev, "fc", 0});
  return spec;
}

std::optional<Cluster> ClusterFromJson(const std::string& file) {
  std::optional<Json> json = ReadJson(file);
  if (!json) return std::nullopt;
  ClusterSpec cs;
  for (const Json& d : json->arr("devices")) {
    cs.devices.push_back({d.str("id"), d.str("host"), d.num("flops"), d.num("memory_bytes")});
  }
  cs.intra_host_bandwidth = json->num("intra_host_bandwidth");
  cs.inter_host_bandwidth = json->num("inter_host_bandwidth");
  auto cluster = Cluster::Build(cs);
  if (!cluster.ok()) return std::nullopt;
  return *std::move(cluster);
}

// The bench's setting (tests/data/cluster_2x8_h100.json, 1F1B memory): the
// MILP stops near its deadline with a valid incumbent and bound. Generous
// limits (a loaded 2-core CI box); a correctness test, not a benchmark.
// PIPEPLAN_MILP_K / PIPEPLAN_MILP_SECONDS / PIPEPLAN_MILP_GRAPH change the case.
TEST(MilpTest, ResNet50ReturnsNearItsDeadline) {
  const char* graph_env = std::getenv("PIPEPLAN_MILP_GRAPH");
  std::optional<Json> json = ReadJson(graph_env ? graph_env : "resnet50.json");
  auto graph = Graph::Build(json ? GraphFromJson(*json) : ResNetLike());
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::optional<Cluster> cluster = ClusterFromJson("cluster_2x8_h100.json");
  if (!cluster) {
    ClusterSpec cs;
    for (int d = 0; d < 16; ++d) {
      cs.devices.push_back({absl::StrCat("gpu", d), absl::StrCat("node", d / 8), 4e14, 8e10});
    }
    cs.intra_host_bandwidth = 3e11;
    cs.inter_host_bandwidth = 2.5e10;
    cluster = *Cluster::Build(cs);
  }
  CostModel cost(*graph, *cluster, {});
  const char* k_env = std::getenv("PIPEPLAN_MILP_K");
  const char* s_env = std::getenv("PIPEPLAN_MILP_SECONDS");
  const int k = k_env ? std::atoi(k_env) : 8;
  const double budget = s_env ? std::atof(s_env) : 1.0;
  PartitionProblem problem;
  problem.cost = &cost;
  problem.relative_gap = 0.01;
  for (int j = 0; j < k; ++j) {
    problem.stage_device.push_back(j);
    problem.stage_inflight.push_back(k - j);
  }
  const auto dp = MakeChainDpPartitioner()->Solve(problem);
  ASSERT_TRUE(dp.ok()) << dp.status();
  problem.warm_start = dp->stage_of_node;
  const absl::Time start = absl::Now();
  problem.deadline = start + absl::Seconds(budget);
  const auto m = MakeMilpPartitioner()->Solve(problem);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ASSERT_TRUE(m.ok()) << m.status();
  auto check = MakePartition(problem, m->stage_of_node);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_TRUE(check->fits_memory);
  EXPECT_DOUBLE_EQ(check->objective, m->objective);
  EXPECT_LE(m->objective, dp->objective * (1 + 1e-12));
  EXPECT_LE(m->lower_bound, m->objective);
  if (!s_env) {
    EXPECT_LT(seconds, 2 * budget) << m->note;
  }
  std::printf("%s k=%d budget %.2fs: %.3fs objective %.6g (dp %.6g) bound %.6g gap %.3g | %s\n",
              graph->name().c_str(), k, budget, seconds, m->objective, dp->objective,
              m->lower_bound, (m->objective - m->lower_bound) / m->objective, m->note.c_str());
}

TEST(MilpTest, ResNet50Measurement) {
  std::optional<Json> json = ReadJson("resnet50.json");
  auto graph = Graph::Build(json ? GraphFromJson(*json) : ResNetLike());
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int k : {4, 8}) {
    for (CommModel comm : {CommModel::kDirect, CommModel::kRelay}) {
      for (bool hetero : {false, true}) {
        ClusterSpec cs;
        for (int d = 0; d < k; ++d) {
          cs.devices.push_back({absl::StrCat("gpu", d), absl::StrCat("host", hetero ? d / 2 : 0),
                                hetero ? (d % 3 == 2 ? 9e13 : 1.5e14) : 1.5e14, 8e10});
        }
        auto cluster = Cluster::Build(cs);
        ASSERT_TRUE(cluster.ok());
        CostOptions co;
        co.comm_model = comm;
        co.optimizer_state_multiplier = 2;
        CostModel cost(*graph, *cluster, co);
        PartitionProblem problem;
        problem.cost = &cost;
        for (int j = 0; j < k; ++j) {
          problem.stage_device.push_back(j);
          problem.stage_inflight.push_back(k - j);
        }
        const absl::Time start = absl::Now();
        // PIPEPLAN_MILP_SECONDS sets the budget for longer measurements.
        const char* budget = std::getenv("PIPEPLAN_MILP_SECONDS");
        const double seconds_budget = budget ? std::atof(budget) : 4;
        problem.deadline = start + absl::Seconds(seconds_budget);
        const auto dp = MakeChainDpPartitioner()->Solve(problem);
        ASSERT_TRUE(dp.ok()) << dp.status();
        const auto m = MakeMilpPartitioner()->Solve(problem);
        const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
        ASSERT_TRUE(m.ok()) << m.status();
        // Measurement only: HonoursDeadline checks the limit. Known issue: CBC
        // checks its limit only between root cut passes and nodes and overshoots
        // by a few seconds on the 8-stage models of this graph (more on a loaded
        // machine), so no timing assertion here.
        EXPECT_LE(m->objective, dp->objective * (1 + 1e-12));
        EXPECT_LE(m->lower_bound, m->objective);
        std::printf(
            "%s k=%d %s %s: %.2fs objective %.6g (dp %.6g, -%.2f%%) bound %.6g gap %.3g%% "
            "nodes %lld | %s\n",
            graph->name().c_str(), k, comm == CommModel::kRelay ? "relay" : "direct",
            hetero ? "hetero" : "homog", seconds, m->objective, dp->objective,
            100 * (dp->objective - m->objective) / dp->objective, m->lower_bound,
            100 * (m->objective - m->lower_bound) / m->objective,
            static_cast<long long>(m->nodes_explored), m->note.c_str());
      }
    }
  }
}

}  // namespace
}  // namespace pipeplan
