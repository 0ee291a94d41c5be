// Stage times per operator kind: a fit on one split's measured stages
// (fixed cost per action + per-kind factors, as FitStageTimes and
// FitStageKinds find them) prices another split's stages node by node, as
// the as-run model does (ApplyStageTimeFit with the split).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "pipeplan/core/stage_time_fit.h"

namespace pipeplan {
namespace {

// A chain: embed, 4 x (norm, attn, mlp), head; on 4 devices of 1 TFLOP/s.
struct KindChain {
  Graph graph;
  Cluster cluster;
};

// Appends a node of kind `op` to the chain `g`.
void Add(GraphSpec& g, const std::string& op, double flops) {
  const std::string id = op + std::to_string(g.nodes.size());
  g.nodes.push_back({.id = id, .op = op, .forward_flops = flops, .output_bytes = 1e3});
  if (g.nodes.size() > 1) g.edges.push_back({.src = g.nodes[g.nodes.size() - 2].id, .dst = id});
}

// The chain `g` on 4 devices of 1 TFLOP/s.
KindChain OnFourDevices(const GraphSpec& g) {
  ClusterSpec c;
  for (int d = 0; d < 4; ++d) {
    c.devices.push_back(
        {.id = "c" + std::to_string(d), .host = "h", .flops = 1e12, .memory_bytes = 1e12});
  }
  return {*Graph::Build(g), *Cluster::Build(c)};
}

KindChain MakeChain() {
  GraphSpec g{.name = "gpt"};
  Add(g, "embed", 2e8);
  for (int b = 0; b < 4; ++b) {
    Add(g, "norm", 1e8);
    Add(g, "attn", 1e9);
    Add(g, "mlp", 2e9);
  }
  Add(g, "head", 1e9);
  return OnFourDevices(g);
}

// The executor's truth per node kind (x modelled seconds), and per action.
const std::map<std::string, double> kTruth = {{"embed", 6}, {"norm", 4},   {"attn", 1.5},
                                              {"mlp", 1},   {"head", 2.5}, {"view", 1}};
constexpr double kFixedF = 2e-3, kFixedB = 3e-3;

// True F and B per microbatch of each stage of `split`; each node also
// costs `per_node` seconds (its dispatch) in F and in B.
std::vector<MeasuredStage> Truth(const KindChain& s, const CostModel& cost,
                                 const std::vector<int>& split, int stages, double per_node = 0) {
  std::vector<MeasuredStage> out(stages, {kFixedF, kFixedB, -1});
  for (int v = 0; v < s.graph.num_nodes(); ++v) {
    const double k = kTruth.at(s.graph.node(v).op);
    out[split[v]].forward_seconds += k * cost.forward_ref(v) + per_node;
    out[split[v]].backward_seconds += k * cost.backward_ref(v) + per_node;
  }
  return out;
}

// Five steps of reports of `truth`, stage s on device s % 4, 4 microbatches.
std::vector<StepSample> Reports(const std::vector<MeasuredStage>& truth) {
  std::vector<StepSample> out;
  for (int64_t step = 0; step < 5; ++step) {
    for (int d = 0; d < 4; ++d) {
      StepSample r{.worker_id = "w" + std::to_string(d), .device_id = "c" + std::to_string(d)};
      r.step = step;
      for (size_t s = d; s < truth.size(); s += 4) {
        for (int mb = 0; mb < 4; ++mb) {
          const std::string m = std::to_string(mb), st = std::to_string(s);
          r.timings.push_back({.action = st + "F" + m, .seconds = truth[s].forward_seconds});
          r.timings.push_back({.action = st + "B" + m, .seconds = truth[s].backward_seconds});
        }
      }
      out.push_back(r);
    }
  }
  return out;
}

// What the plan that ran predicted per stage (modelled, factor 1).
std::vector<PlannedStage> Planned(const CostModel& cost, const std::vector<int>& split,
                                  int stages) {
  std::vector<PlannedStage> out(stages);
  for (int s = 0; s < stages; ++s) out[s].device_id = "c" + std::to_string(s % 4);
  for (int v = 0; v < cost.graph().num_nodes(); ++v) {
    out[split[v]].forward_seconds += cost.forward_ref(v);
    out[split[v]].backward_seconds += cost.backward_ref(v);
  }
  return out;
}

// Split A: 14 nodes in 8 stages (an interleaved plan, two per device).
const std::vector<int> kSplitA = {0, 0, 1, 1, 2, 2, 3, 3, 4, 5, 5, 6, 6, 7};
// Split B: 4 stages cut elsewhere, the embedding with the first two blocks.
const std::vector<int> kSplitB = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 3};

std::vector<int> Devices(int stages) {
  std::vector<int> out;
  for (int s = 0; s < stages; ++s) out.push_back(s % 4);
  return out;
}

TEST(StageKindFit, FitOnOneSplitPricesAnotherNodeByNode) {
  const KindChain s = MakeChain();
  const CostModel cost(s.graph, s.cluster, {});
  const std::vector<StepSample> reports = Reports(Truth(s, cost, kSplitA, 8));
  StageTimeFit fit = FitStageTimes(reports, Planned(cost, kSplitA, 8));
  ASSERT_TRUE(fit.fitted);
  FitStageKinds(reports, cost, kSplitA, Devices(8), fit, {.ridge = 1e-6});
  ASSERT_TRUE(fit.kinds.has_value());
  const std::vector<MeasuredStage> truth = Truth(s, cost, kSplitB, 4);
  absl::StatusOr<std::vector<StageCost>> stages = cost.Evaluate(kSplitB, Devices(4));
  ASSERT_TRUE(stages.ok()) << stages.status();
  schedule::StageCosts priced;
  for (const StageCost& st : *stages) {
    priced.forward.push_back(st.forward_seconds);
    priced.backward_input.push_back(st.backward_seconds - st.weight_grad_seconds);
    priced.backward_weight.push_back(st.weight_grad_seconds);
  }
  schedule::StageCosts scaled = priced;
  ApplyStageTimeFit(fit, cost, kSplitB, Devices(4), {}, priced);
  // Within 3%: here every node of a kind has the same flops, so the cost
  // per node and the kinds' factors are interchangeable and the ridge
  // settles between them.
  for (int st = 0; st < 4; ++st) {
    EXPECT_NEAR(priced.forward[st] / truth[st].forward_seconds, 1, 0.03) << st;
    const double b = priced.backward_input[st] + priced.backward_weight[st];
    EXPECT_NEAR(b / truth[st].backward_seconds, 1, 0.03) << st;
  }
  // One scale for the whole model (the fit without kinds) is off on the
  // stage that now holds the embedding and two blocks' norms.
  fit.kinds.reset();
  ApplyStageTimeFit(fit, cost, kSplitB, Devices(4), {}, scaled);
  double worst = 0;
  for (int st = 0; st < 4; ++st) {
    worst = std::max(worst, std::abs(scaled.forward[st] / truth[st].forward_seconds - 1));
  }
  EXPECT_GT(worst, 0.1);
}

// A straggler (c3 at 1.5x) stays the slow device; the kinds price the
// other split's stages on the quiet devices within 7% (the straggler's
// stages hold the only head, so the two rounds of FitStageKinds leave part
// of its slowdown in the kinds).
TEST(StageKindFit, KeepsAStragglerOutOfTheKinds) {
  const KindChain s = MakeChain();
  const CostModel cost(s.graph, s.cluster, {});
  std::vector<MeasuredStage> a = Truth(s, cost, kSplitA, 8);
  for (int st : {3, 7}) a[st].forward_seconds *= 1.5, a[st].backward_seconds *= 1.5;
  const std::vector<StepSample> reports = Reports(a);
  StageTimeFit fit = FitStageTimes(reports, Planned(cost, kSplitA, 8));
  FitStageKinds(reports, cost, kSplitA, Devices(8), fit, {.ridge = 1e-6});
  ASSERT_TRUE(fit.kinds.has_value());
  EXPECT_GT(fit.device_factor.at("c3"), 1.2);
  const std::vector<MeasuredStage> truth = Truth(s, cost, kSplitB, 4);
  absl::StatusOr<std::vector<StageCost>> stages = cost.Evaluate(kSplitB, Devices(4));
  ASSERT_TRUE(stages.ok());
  schedule::StageCosts priced;
  for (const StageCost& st : *stages) {
    priced.forward.push_back(st.forward_seconds);
    priced.backward_input.push_back(st.backward_seconds - st.weight_grad_seconds);
    priced.backward_weight.push_back(st.weight_grad_seconds);
  }
  ApplyStageTimeFit(fit, cost, kSplitB, Devices(4), {}, priced);
  for (int st = 0; st < 3; ++st) {
    EXPECT_NEAR(priced.forward[st] / truth[st].forward_seconds, 1, 0.07) << st;
  }
  EXPECT_GT(priced.forward[3] / truth[3].forward_seconds, 1.2);
}

// The same 1.5x on c3's stages, with the four workers on one CPU pool (one
// machine's cores, cpu_pools.h): the devices cannot differ in speed, so
// the residual is those stages' model error. No device takes a factor of
// its own that would follow it to another split's stages.
TEST(StageKindFit, DevicesOnOneCpuPoolShareTheirResidual) {
  const KindChain s = MakeChain();
  const CostModel cost(s.graph, s.cluster, {});
  std::vector<MeasuredStage> a = Truth(s, cost, kSplitA, 8);
  for (int st : {3, 7}) a[st].forward_seconds *= 1.5, a[st].backward_seconds *= 1.5;
  std::vector<StepSample> reports = Reports(a);
  for (StepSample& r : reports) {
    r.cpu_pool = "m:0-1";
    r.cpu_pool_cpus = 2;
    r.compute_threads = 1;
  }
  StageTimeFit fit = FitStageTimes(reports, Planned(cost, kSplitA, 8));
  FitStageKinds(reports, cost, kSplitA, Devices(8), fit, {.ridge = 1e-6});
  ASSERT_TRUE(fit.kinds.has_value());
  ASSERT_EQ(fit.device_factor.size(), 4u);
  for (const auto& [device, factor] : fit.device_factor) EXPECT_EQ(factor, 1.0) << device;
}

// Ops without flops (a view per block) still cost their dispatch: a cost
// per node, fitted with the kinds, prices a split that moves them.
TEST(StageKindFit, PricesOpsWithoutFlopsPerNode) {
  GraphSpec g{.name = "views"};
  Add(g, "embed", 2e8);
  for (int b = 0; b < 4; ++b) {
    Add(g, "attn", 1e9);
    for (int i = 0; i < 2 + 2 * b; ++i) Add(g, "view", 0);  // 2, 4, 6, 8 views
    Add(g, "mlp", 2e9);
  }
  Add(g, "head", 1e9);
  const KindChain s = OnFourDevices(g);
  const CostModel cost(s.graph, s.cluster, {});
  // A: 30 nodes in 8 stages (attention, views and MLP of a block apart);
  // B: 4 stages cut elsewhere.
  const std::vector<int> a = {0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 4, 4, 4,
                              4, 4, 4, 4, 5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7};
  std::vector<int> b;
  for (int v = 0; v < 30; ++v) b.push_back(v < 12 ? 0 : v < 20 ? 1 : v < 26 ? 2 : 3);
  const int stages_a = a.back() + 1;
  const std::vector<StepSample> reports = Reports(Truth(s, cost, a, stages_a, 5e-5));
  StageTimeFit fit = FitStageTimes(reports, Planned(cost, a, stages_a));
  ASSERT_TRUE(fit.fitted);
  FitStageKinds(reports, cost, a, Devices(stages_a), fit, {.ridge = 1e-6});
  ASSERT_TRUE(fit.kinds.has_value());
  EXPECT_NEAR(fit.kinds->forward_per_node_seconds, 5e-5, 5e-6);
  const std::vector<MeasuredStage> truth = Truth(s, cost, b, 4, 5e-5);
  const std::vector<MeasuredStage> priced = PredictStageTimes(cost, *fit.kinds, b, Devices(4));
  for (int st = 0; st < 4; ++st) {
    EXPECT_NEAR(priced[st].forward_seconds / truth[st].forward_seconds, 1, 0.02) << st;
  }
}

// Stages of equal flops whose weights grow 4x per stage (a CNN's later
// layers on a small image), each weight byte costing 0.1 ns in F and 0.2 in
// B: the stages' bytes differ though their flops do not, so FitStageKinds
// fits (a cost per byte) and prices a split that moves the weights.
TEST(StageKindFit, PricesWeightsThatCostByTheirBytes) {
  GraphSpec g{.name = "cnn"};
  for (int stage = 0; stage < 4; ++stage) {
    for (int i = 0; i < 2; ++i) {
      Add(g, "conv2d", 5e8);
      g.nodes.back().param_bytes = 1e5 * std::pow(4.0, stage);
    }
  }
  const KindChain s = OnFourDevices(g);
  const CostModel cost(s.graph, s.cluster, {});
  auto truth = [&](const std::vector<int>& split, int stages) {
    std::vector<MeasuredStage> out(stages, {0, 0, -1});
    for (int v = 0; v < s.graph.num_nodes(); ++v) {
      const double bytes = s.graph.node(v).param_bytes;
      out[split[v]].forward_seconds += cost.forward_ref(v) + 1e-10 * bytes;
      out[split[v]].backward_seconds += cost.backward_ref(v) + 2e-10 * bytes;
    }
    return out;
  };
  const std::vector<int> a = {0, 0, 1, 1, 2, 2, 3, 3}, b = {0, 0, 0, 0, 0, 1, 1, 1};
  const std::vector<StepSample> reports = Reports(truth(a, 4));
  StageTimeFit fit = FitStageTimes(reports, Planned(cost, a, 4));
  ASSERT_TRUE(fit.fitted);
  FitStageKinds(reports, cost, a, Devices(4), fit, {});
  ASSERT_TRUE(fit.kinds.has_value());
  EXPECT_NEAR(fit.kinds->forward_seconds_per_param_byte, 1e-10, 2e-12);
  const std::vector<MeasuredStage> want = truth(b, 2);
  const std::vector<MeasuredStage> priced = PredictStageTimes(cost, *fit.kinds, b, Devices(2));
  for (int st = 0; st < 2; ++st) {
    EXPECT_NEAR(priced[st].forward_seconds / want[st].forward_seconds, 1, 0.02) << st;
    EXPECT_NEAR(priced[st].backward_seconds / want[st].backward_seconds, 1, 0.02) << st;
  }
}

TEST(StageKindFit, AnUnfittedFitOrAnotherGraphLeavesTheScales) {
  const KindChain s = MakeChain();
  const CostModel cost(s.graph, s.cluster, {});
  const std::vector<StepSample> reports = Reports(Truth(s, cost, kSplitA, 8));
  StageTimeFit unfitted;
  FitStageKinds(reports, cost, kSplitA, Devices(8), unfitted);
  EXPECT_FALSE(unfitted.kinds.has_value());
  StageTimeFit fit = FitStageTimes(reports, Planned(cost, kSplitA, 8));
  const std::vector<int> short_split = {0, 1};
  FitStageKinds(reports, cost, short_split, Devices(8), fit);
  EXPECT_FALSE(fit.kinds.has_value());
}

}  // namespace
}  // namespace pipeplan
