// Calibration a new split can use: kind corrections fitted on one split
// predict another split's stage times; device factors cannot.
#include "pipeplan/core/node_corrections.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pipeplan {
namespace {

// A small transformer-like chain: embed, 4 x (norm, attn, norm, mlp), head.
// The "truth" runs embed 4x, norm 3x, attn 1.5x, mlp 1x, head 2x the model.
struct KindSetup {
  Graph graph;
  Cluster cluster;
  std::map<std::string, double> truth{
      {"embed", 4}, {"norm", 3}, {"attn", 1.5}, {"mlp", 1}, {"head", 2}};
};

// Four devices of 1 TFLOP/s on one host.
Cluster FourDevices() {
  ClusterSpec c;
  for (int d = 0; d < 4; ++d) {
    c.devices.push_back(
        {.id = "c" + std::to_string(d), .host = "h", .flops = 1e12, .memory_bytes = 1e12});
  }
  return *Cluster::Build(c);
}

KindSetup MakeSetup() {
  GraphSpec g{.name = "gpt"};
  auto add = [&](const std::string& op, double flops, double params) {
    const std::string id = op + std::to_string(g.nodes.size());
    g.nodes.push_back({.id = id, .op = op, .forward_flops = flops, .param_bytes = params});
    if (g.nodes.size() > 1) g.edges.push_back({.src = g.nodes[g.nodes.size() - 2].id, .dst = id});
  };
  add("embed", 2e8, 4e6);
  for (int b = 0; b < 4; ++b) {
    add("norm", 5e7, 1e3);
    add("attn", 1e9, 1e6);
    add("norm", 5e7, 1e3);
    add("mlp", 2e9, 2e6);
  }
  add("head", 1e9, 4e6);
  return {*Graph::Build(g), FourDevices()};
}

// What the truth measures for `split` (optimizer: 1 ms + 1 ns per byte).
std::vector<MeasuredStage> Measure(const KindSetup& s, const CostModel& cost,
                                   const std::vector<int>& split, const std::vector<int>& dev) {
  std::vector<MeasuredStage> out(dev.size(), {0, 0, 1e-3});
  for (int v = 0; v < s.graph.num_nodes(); ++v) {
    const double k = s.truth.at(s.graph.node(v).op);
    out[split[v]].forward_seconds += k * cost.forward_ref(v);
    out[split[v]].backward_seconds += k * cost.backward_ref(v);
    out[split[v]].optimizer_seconds += 1e-9 * s.graph.node(v).param_bytes;
  }
  return out;
}

// Plan A: 18 nodes cut 5/4/4/5 on 4 devices, and each half of the blocks
// once more in 8 stages (the interleaved plan measured: more equations).
const std::vector<int> kSplitA8 = {0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7};
const std::vector<int> kSplitA4 = {0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3};
// Plan B: cut elsewhere, 2 stages.
const std::vector<int> kSplitB = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

TEST(NodeCorrections, FitOnOneSplitPredictsAnother) {
  const KindSetup s = MakeSetup();
  const CostModel cost(s.graph, s.cluster, {});
  const std::vector<int> dev8 = {0, 1, 2, 3, 0, 1, 2, 3};
  absl::StatusOr<KindCorrections> fit =
      FitKindCorrections(cost, kSplitA8, dev8, Measure(s, cost, kSplitA8, dev8), {.ridge = 1e-4});
  ASSERT_TRUE(fit.ok()) << fit.status();
  const std::vector<int> dev2 = {0, 1};
  const std::vector<MeasuredStage> truth = Measure(s, cost, kSplitB, dev2);
  const std::vector<MeasuredStage> predicted = PredictStageTimes(cost, *fit, kSplitB, dev2);
  for (int st = 0; st < 2; ++st) {
    EXPECT_NEAR(predicted[st].forward_seconds / truth[st].forward_seconds, 1, 0.03) << st;
    EXPECT_NEAR(predicted[st].backward_seconds / truth[st].backward_seconds, 1, 0.03) << st;
    EXPECT_NEAR(predicted[st].optimizer_seconds / truth[st].optimizer_seconds, 1, 0.03) << st;
  }
}

// One factor per stage's device (what device factors do) carried to the
// other split is off by 7% a stage here; the kind fit on the same four
// measurements (fewer than the five kinds: the ridge keeps what they cannot
// tell apart near the common factor) is closer.
TEST(NodeCorrections, BeatsDeviceFactorsOnAnotherSplit) {
  const KindSetup s = MakeSetup();
  const CostModel cost(s.graph, s.cluster, {});
  const std::vector<int> dev4 = {0, 1, 2, 3};
  const std::vector<MeasuredStage> a = Measure(s, cost, kSplitA4, dev4);
  absl::StatusOr<KindCorrections> fit = FitKindCorrections(cost, kSplitA4, dev4, a);
  ASSERT_TRUE(fit.ok()) << fit.status();
  // Device factors of A: stage s's measured / modelled, on device s.
  const std::vector<MeasuredStage> modelled = PredictStageTimes(cost, {}, kSplitA4, dev4);
  const std::vector<int> dev2 = {0, 3};
  const std::vector<MeasuredStage> truth = Measure(s, cost, kSplitB, dev2);
  const std::vector<MeasuredStage> plain = PredictStageTimes(cost, {}, kSplitB, dev2);
  const std::vector<MeasuredStage> kinds = PredictStageTimes(cost, *fit, kSplitB, dev2);
  double device_err = 0, kind_err = 0;
  for (int st = 0; st < 2; ++st) {
    const int d = dev2[st];
    const double factor = a[d].forward_seconds / modelled[d].forward_seconds;
    device_err += std::abs(factor * plain[st].forward_seconds / truth[st].forward_seconds - 1);
    kind_err += std::abs(kinds[st].forward_seconds / truth[st].forward_seconds - 1);
  }
  EXPECT_LT(kind_err, device_err * 0.8) << kind_err << " vs " << device_err;
  EXPECT_LT(kind_err / 2, 0.06);
}

// A CNN-like chain: convolutions of equal flops whose weights grow 4x per
// group (late layers on a small image), run at 1x their flops plus a cost
// per weight byte.
struct ConvSetup {
  Graph graph;
  Cluster cluster;
};

ConvSetup MakeConvChain(bool measured_times = false) {
  GraphSpec g{.name = "cnn"};
  for (int group = 0; group < 4; ++group) {
    for (int i = 0; i < 3; ++i) {
      const std::string id = "conv" + std::to_string(g.nodes.size());
      g.nodes.push_back({.id = id,
                         .op = i == 2 ? "relu" : "conv2d",
                         .forward_flops = i == 2 ? 1e6 : 5e8,
                         .param_bytes = i == 2 ? 0 : 1e5 * std::pow(4.0, group)});
      if (measured_times) {  // as the exporter's --profile writes them
        g.nodes.back().forward_seconds = i == 2 ? 1e-6 : 5e-4;
        g.nodes.back().backward_seconds = i == 2 ? 2e-6 : 1e-3;
      }
      if (g.nodes.size() > 1) {
        g.edges.push_back({.src = g.nodes[g.nodes.size() - 2].id, .dst = id});
      }
    }
  }
  return {*Graph::Build(g), FourDevices()};
}

std::vector<MeasuredStage> MeasureConv(const ConvSetup& s, const CostModel& cost,
                                       const std::vector<int>& split, int stages, double per_byte) {
  std::vector<MeasuredStage> out(stages, {0, 0, -1});
  for (int v = 0; v < s.graph.num_nodes(); ++v) {
    const double bytes = s.graph.node(v).param_bytes;
    out[split[v]].forward_seconds += cost.forward_ref(v) + per_byte * bytes;
    out[split[v]].backward_seconds += cost.backward_ref(v) + 2 * per_byte * bytes;
  }
  return out;
}

// Weights that cost by their bytes: the stages of split A (one group each)
// hold 0.2 to 12.8 MB for the same flops. A fit per kind alone puts the last
// stage's cost on the convolutions' flops and misprices a split that halves
// the model; the per-byte cost, chosen by leave-one-out, prices it.
TEST(NodeCorrections, WeightsThatCostByTheirBytesPriceAnotherSplit) {
  const ConvSetup s = MakeConvChain();
  const CostModel cost(s.graph, s.cluster, {});
  const std::vector<int> a = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3};
  const std::vector<int> b = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<int> dev4 = {0, 1, 2, 3}, dev2 = {0, 1};
  const double per_byte = 1e-10;  // 0.1 ms per MB: the last group 2.6 ms, its flops 1 ms
  absl::StatusOr<KindCorrections> fit =
      FitKindCorrections(cost, a, dev4, MeasureConv(s, cost, a, 4, per_byte), {.fit_fixed = true});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->forward_seconds_per_param_byte, per_byte, 0.02 * per_byte);
  EXPECT_NEAR(fit->backward_seconds_per_param_byte, 2 * per_byte, 0.04 * per_byte);
  const std::vector<MeasuredStage> truth = MeasureConv(s, cost, b, 2, per_byte);
  const std::vector<MeasuredStage> priced = PredictStageTimes(cost, *fit, b, dev2);
  for (int st = 0; st < 2; ++st) {
    EXPECT_NEAR(priced[st].forward_seconds / truth[st].forward_seconds, 1, 0.02) << st;
    EXPECT_NEAR(priced[st].backward_seconds / truth[st].backward_seconds, 1, 0.02) << st;
  }
}

// Where the weights cost nothing extra, leave-one-out keeps the per-byte
// (and fixed, per-node) costs out: they would only fit noise.
TEST(NodeCorrections, NoByteCostWhereTheFlopsExplainTheStages) {
  const ConvSetup s = MakeConvChain();
  const CostModel cost(s.graph, s.cluster, {});
  const std::vector<int> a = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3};
  const std::vector<int> dev4 = {0, 1, 2, 3};
  std::vector<MeasuredStage> measured = MeasureConv(s, cost, a, 4, 0);
  // +-1% noise, alternating.
  for (int st = 0; st < 4; ++st) measured[st].forward_seconds *= st % 2 ? 1.01 : 0.99;
  absl::StatusOr<KindCorrections> fit =
      FitKindCorrections(cost, a, dev4, measured, {.fit_fixed = true});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->forward_seconds_per_param_byte, 0);
  EXPECT_EQ(fit->forward_fixed_seconds, 0);
  EXPECT_EQ(fit->forward_per_node_seconds, 0);
  EXPECT_NEAR(fit->forward_common, 1, 0.02);
}

// On a graph with measured node times a node's dispatch and its weights'
// cost are in its own time: no extra cost is fitted, even where the stages
// would tell one apart (the bytes' cost of the test above then shows as
// the convolutions' factor, not as a rate).
TEST(NodeCorrections, MeasuredNodeTimesTakeNoExtraCost) {
  const ConvSetup s = MakeConvChain(/*measured_times=*/true);
  const CostModel cost(s.graph, s.cluster, {});
  const std::vector<int> a = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3};
  const std::vector<int> dev4 = {0, 1, 2, 3};
  absl::StatusOr<KindCorrections> fit =
      FitKindCorrections(cost, a, dev4, MeasureConv(s, cost, a, 4, 1e-10), {.fit_fixed = true});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->forward_seconds_per_param_byte, 0);
  EXPECT_EQ(fit->backward_seconds_per_param_byte, 0);
  EXPECT_EQ(fit->forward_per_node_seconds, 0);
  EXPECT_EQ(fit->backward_per_node_seconds, 0);
  EXPECT_EQ(fit->forward_fixed_seconds, 0);
  EXPECT_EQ(fit->backward_fixed_seconds, 0);
  EXPECT_GT(fit->ForwardFactor("conv2d"), 1.05);
  // The same stages on flop-derived costs do get the per-byte cost.
  const ConvSetup flops = MakeConvChain();
  const CostModel flop_cost(flops.graph, flops.cluster, {});
  absl::StatusOr<KindCorrections> by_flops = FitKindCorrections(
      flop_cost, a, dev4, MeasureConv(flops, flop_cost, a, 4, 1e-10), {.fit_fixed = true});
  ASSERT_TRUE(by_flops.ok()) << by_flops.status();
  EXPECT_GT(by_flops->forward_seconds_per_param_byte, 0);
}

TEST(NodeCorrections, RejectsMismatchedSizes) {
  const KindSetup s = MakeSetup();
  const CostModel cost(s.graph, s.cluster, {});
  const std::vector<int> dev = {0, 1};
  const std::vector<MeasuredStage> one(1);
  EXPECT_EQ(FitKindCorrections(cost, kSplitB, dev, one).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<MeasuredStage> none(2);
  EXPECT_EQ(FitKindCorrections(cost, kSplitB, dev, none).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pipeplan
