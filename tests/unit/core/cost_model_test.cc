#include "pipeplan/core/cost_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pipeplan {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;

// x -> a -> b -> c with a skip x -> c; one device per stage, 1e12 flop/s,
// 1e9 B/s links with 1 ms latency so the arithmetic is easy to follow.
struct Fixture {
  Fixture(CommModel comm) {
    GraphSpec spec;
    spec.nodes = {{.id = "x", .forward_flops = 1e12, .param_bytes = 100, .output_bytes = 1e9},
                  {.id = "a",
                   .forward_flops = 2e12,
                   .param_bytes = 50,
                   .output_bytes = 2e9,
                   .param_key = "tied"},
                  {.id = "b", .forward_flops = 1e12, .activation_bytes = 7, .output_bytes = 1e9},
                  {.id = "c", .forward_flops = 1e12, .param_bytes = 50, .param_key = "tied"}};
    spec.edges = {{"x", "a"}, {"a", "b"}, {"b", "c"}, {"x", "c", 3e9}};
    graph = std::make_unique<Graph>(*Graph::Build(std::move(spec)));
    ClusterSpec cs;
    for (int d = 0; d < 3; ++d) {
      cs.devices.push_back(
          {.id = "g" + std::to_string(d), .host = "h", .flops = 1e12, .memory_bytes = 1e12});
    }
    cs.intra_host_bandwidth = 1e9;
    cs.intra_host_latency = 1e-3;
    cluster = std::make_unique<Cluster>(*Cluster::Build(std::move(cs)));
    cost = std::make_unique<CostModel>(
        *graph, *cluster, CostOptions{.comm_model = comm, .optimizer_state_multiplier = 4});
  }
  std::unique_ptr<Graph> graph;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<CostModel> cost;
};

TEST(CostModelTest, ComputeAndMemory) {
  Fixture f(CommModel::kDirect);
  auto stages = f.cost->Evaluate(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1});
  ASSERT_TRUE(stages.ok()) << stages.status();
  // Forward 3e12 flops at 1e12 flop/s, backward twice that.
  EXPECT_DOUBLE_EQ((*stages)[0].forward_seconds, 3);
  EXPECT_DOUBLE_EQ((*stages)[0].backward_seconds, 6);
  EXPECT_DOUBLE_EQ((*stages)[1].forward_seconds, 2);
  // Stage 0 holds x (100) and the tied group (50); stage 1 holds the tied
  // group again: tied parameters count once per stage, on every stage.
  EXPECT_DOUBLE_EQ((*stages)[0].param_bytes, 150);
  EXPECT_DOUBLE_EQ((*stages)[1].param_bytes, 50);
  EXPECT_DOUBLE_EQ((*stages)[0].param_state_bytes, 150 * 6);  // weights + grads + 4x optimizer
  // Activations default to output bytes; b sets its own; c has none.
  EXPECT_DOUBLE_EQ((*stages)[0].activation_bytes, 3e9);
  EXPECT_DOUBLE_EQ((*stages)[1].activation_bytes, 7);
  EXPECT_DOUBLE_EQ((*stages)[1].memory_bytes(3), 50 * 6 + 21);
}

TEST(CostModelTest, DirectChargesEachTensorOncePerSide) {
  Fixture f(CommModel::kDirect);
  // Stages {x} {a, b} {c}: x's tensor goes to stage 1 (a, 1e9 B) and stage 2
  // (c, 3e9 B); b's tensor goes to stage 2 (1e9 B).
  auto s = f.cost->Evaluate(std::vector<int>{0, 1, 1, 2}, std::vector<int>{0, 1, 2});
  ASSERT_TRUE(s.ok()) << s.status();
  const double t1 = 1 + 1e-3, t3 = 3 + 1e-3;
  // Producer pays once per tensor, on its slowest destination.
  EXPECT_THAT((*s)[0].forward_comm_seconds, DoubleNear(t3, 1e-12));
  EXPECT_THAT((*s)[0].backward_comm_seconds, DoubleNear(t3, 1e-12));
  EXPECT_THAT((*s)[1].forward_comm_seconds, DoubleNear(t1 + t1, 1e-12));  // receives x, sends b
  EXPECT_THAT((*s)[2].forward_comm_seconds, DoubleNear(t3 + t1, 1e-12));  // receives x and b
  EXPECT_THAT(BottleneckSeconds(*s), DoubleNear((*s)[1].compute_seconds() + 4 * t1, 1e-12));
}

TEST(CostModelTest, RelayChargesEveryBoundary) {
  Fixture f(CommModel::kRelay);
  auto s = f.cost->Evaluate(std::vector<int>{0, 1, 1, 2}, std::vector<int>{0, 1, 2});
  ASSERT_TRUE(s.ok()) << s.status();
  const double t1 = 1 + 1e-3, t3 = 3 + 1e-3;
  // Boundary 0|1 carries x (largest remaining edge 3e9); boundary 1|2 carries
  // x again (3e9) and b (1e9).
  EXPECT_THAT((*s)[0].forward_comm_seconds, DoubleNear(t3, 1e-12));
  EXPECT_THAT((*s)[1].forward_comm_seconds, DoubleNear(t3 + t3 + t1, 1e-12));
  EXPECT_THAT((*s)[2].forward_comm_seconds, DoubleNear(t3 + t1, 1e-12));
}

TEST(CostModelTest, SameStageCostsNoCommunication) {
  Fixture f(CommModel::kDirect);
  auto s = f.cost->Evaluate(std::vector<int>{0, 0, 0, 0}, std::vector<int>{0});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[0].comm_seconds(), 0);
  EXPECT_DOUBLE_EQ((*s)[0].total_seconds(), 15);
}

TEST(CostModelTest, HeterogeneousDevicesScaleTime) {
  Fixture f(CommModel::kDirect);
  ClusterSpec cs;
  cs.devices = {{.id = "fast", .host = "h", .flops = 2e12, .memory_bytes = 1},
                {.id = "slow", .host = "h", .flops = 5e11, .memory_bytes = 1}};
  Cluster cluster = *Cluster::Build(cs);
  CostModel cost(*f.graph, cluster, {});
  EXPECT_DOUBLE_EQ(cost.slowdown(1), 4);
  auto s = cost.Evaluate(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1});
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ((*s)[0].forward_seconds, 1.5);  // 3e12 at 2e12
  EXPECT_DOUBLE_EQ((*s)[1].forward_seconds, 4);    // 2e12 at 5e11
}

TEST(CostModelTest, SampleScaleAndMeasuredSeconds) {
  GraphSpec spec;
  spec.nodes = {{.id = "m", .forward_flops = 1e12, .output_bytes = 10, .forward_seconds = 0.25}};
  Graph g = *Graph::Build(std::move(spec));
  ClusterSpec cs;
  cs.devices = {{.id = "d", .host = "h", .flops = 1e12, .memory_bytes = 1}};
  Cluster c = *Cluster::Build(cs);
  CostModel cost(g, c, {.sample_scale = 4});
  EXPECT_DOUBLE_EQ(cost.forward_ref(0), 1.0);   // measured 0.25 s x 4
  EXPECT_DOUBLE_EQ(cost.backward_ref(0), 8.0);  // 2e12 flops x 4 / 1e12
  EXPECT_DOUBLE_EQ(cost.activation_bytes(0), 40);
}

TEST(CostModelTest, RejectsInvalidSplits) {
  Fixture f(CommModel::kDirect);
  auto backwards = f.cost->Evaluate(std::vector<int>{1, 0, 1, 1}, std::vector<int>{0, 1});
  ASSERT_FALSE(backwards.ok());
  EXPECT_THAT(std::string(backwards.status().message()),
              HasSubstr("edge \"x\" -> \"a\" goes backwards from stage 1 to stage 0"));
  auto empty = f.cost->Evaluate(std::vector<int>{0, 0, 2, 2}, std::vector<int>{0, 1, 2});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("stage 1 is empty"));
  auto out_of_range = f.cost->Evaluate(std::vector<int>{0, 0, 0, 5}, std::vector<int>{0, 1});
  ASSERT_FALSE(out_of_range.ok());
  auto short_list = f.cost->Evaluate(std::vector<int>{0, 0}, std::vector<int>{0, 1});
  ASSERT_FALSE(short_list.ok());
}

TEST(ClusterTest, LinksOverrideDefaultsAndValidate) {
  ClusterSpec cs;
  cs.devices = {{.id = "a", .host = "h1", .flops = 1, .memory_bytes = 1},
                {.id = "b", .host = "h1", .flops = 1, .memory_bytes = 1},
                {.id = "c", .host = "h2", .flops = 1, .memory_bytes = 1}};
  cs.links = {{.src = "a", .dst = "c", .bandwidth = 7, .latency = 0.5}};
  auto c = Cluster::Build(cs);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bandwidth(0, 1), kDefaultIntraHostBandwidth);
  EXPECT_EQ(c->bandwidth(1, 2), kDefaultInterHostBandwidth);
  EXPECT_EQ(c->bandwidth(0, 2), 7);
  EXPECT_EQ(c->bandwidth(2, 0), 7);
  EXPECT_DOUBLE_EQ(c->TransferSeconds(0, 2, 14), 2.5);
  EXPECT_EQ(c->TransferSeconds(1, 1, 1e9), 0);

  cs.links[0].dst = "zz";
  auto bad = Cluster::Build(cs);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "cluster.links[0].dst \"zz\" is not a device");
  cs.links.clear();
  cs.devices[1].flops = 0;
  bad = Cluster::Build(cs);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cluster.devices[1].flops"));
  cs.devices[1].flops = 1;
  cs.devices[2].id = "a";
  bad = Cluster::Build(cs);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("is duplicated"));
  EXPECT_FALSE(Cluster::Build({}).ok());
}

}  // namespace
}  // namespace pipeplan

namespace pipeplan {
namespace {

// p -> {q, r} over output 0 and p -> s over output 1 (an integer tensor: no
// gradient); every stage on its own device, 1e9 B/s, no latency.
struct TensorFixture {
  TensorFixture(const CostOptions& options) {
    GraphSpec spec;
    spec.nodes = {
        {.id = "p", .forward_flops = 1e12, .output_bytes = 1e9, .outputs_without_grad = {1}},
        {.id = "q", .forward_flops = 1e12, .activation_bytes = 5e8},
        {.id = "r", .forward_flops = 1e12, .activation_bytes = 5e8},
        {.id = "s", .forward_flops = 1e12, .activation_bytes = 5e8}};
    spec.edges = {{"p", "q", 2e9, 0},
                  {"p", "r", 2e9, 0},
                  {"p", "s", 3e9, 1},
                  {"q", "s", 1e9, 0},
                  {"r", "s", 1e9, 0}};
    graph = std::make_unique<Graph>(*Graph::Build(std::move(spec)));
    ClusterSpec cs;
    for (int d = 0; d < 2; ++d) {
      cs.devices.push_back(
          {.id = "g" + std::to_string(d), .host = "h", .flops = 1e12, .memory_bytes = 1e12});
    }
    cs.intra_host_bandwidth = 1e9;
    cs.intra_host_latency = 1e-12;
    cluster = std::make_unique<Cluster>(*Cluster::Build(std::move(cs)));
    cost = std::make_unique<CostModel>(*graph, *cluster, options);
  }
  std::unique_ptr<Graph> graph;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<CostModel> cost;
};

TEST(CostModelTest, OutputsAreSeparateTensorsAndIntegerOnesCarryNoGradient) {
  TensorFixture f({});
  EXPECT_TRUE(f.graph->has_outputs_without_grad());
  // p alone on stage 0: output 0 (2e9, to q and r) and output 1 (3e9, to s)
  // both leave it; their bytes add up, and output 1 comes back with nothing.
  auto stages = f.cost->Evaluate(std::vector<int>{0, 1, 1, 1}, std::vector<int>{0, 1});
  ASSERT_TRUE(stages.ok()) << stages.status();
  EXPECT_NEAR((*stages)[1].forward_comm_seconds, 2 + 3, 1e-9);
  EXPECT_NEAR((*stages)[1].backward_comm_seconds, 2, 1e-9);
  EXPECT_NEAR((*stages)[0].forward_comm_seconds, 5, 1e-9);
  EXPECT_NEAR((*stages)[0].backward_comm_seconds, 2, 1e-9);
  // What stage 1 receives is what recomputation keeps per microbatch.
  EXPECT_NEAR((*stages)[1].input_bytes, 5e9, 1);
}

TEST(CostModelTest, RecomputationKeepsInputsAndRunsTheForwardTwice) {
  TensorFixture plain({});
  TensorFixture recomputing({.recompute = true});
  const std::vector<int> split = {0, 1, 1, 1};
  auto a = plain.cost->Evaluate(split, std::vector<int>{0, 1});
  auto b = recomputing.cost->Evaluate(split, std::vector<int>{0, 1});
  ASSERT_TRUE(a.ok() && b.ok());
  StageCost applied = (*a)[1];
  ApplyRecompute(applied);
  EXPECT_TRUE((*b)[1].recompute);
  EXPECT_NEAR((*b)[1].backward_seconds, (*a)[1].backward_seconds + (*a)[1].forward_seconds, 1e-9);
  EXPECT_NEAR(applied.backward_seconds, (*b)[1].backward_seconds, 1e-9);
  EXPECT_NEAR(applied.weight_grad_seconds, (*a)[1].weight_grad_seconds, 1e-12);
  // 4 in flight: plain keeps 4 x 1.5e9 of activations; recomputing keeps 4 x
  // its 5e9 of inputs plus one microbatch's activations while it recomputes.
  EXPECT_NEAR((*a)[1].memory_bytes(4), 4 * 1.5e9, 1);
  EXPECT_NEAR(applied.memory_bytes(4), 4 * 5e9 + 1.5e9, 1);
}

// The backward passes the nodes in reverse topological order, freeing what
// each saved: a large working set at the first node adds only what exceeds
// the activations already freed; at the last node it adds all of it.
TEST(CostModelTest, TheBackwardWorkingSetCountsWhatIsStillHeld) {
  for (const bool big_first : {true, false}) {
    GraphSpec spec;
    spec.nodes = {{.id = "a", .forward_flops = 1e12, .activation_bytes = 4e9, .output_bytes = 1e6},
                  {.id = "b", .forward_flops = 1e12, .activation_bytes = 4e9, .output_bytes = 1e6}};
    spec.nodes[big_first ? 0 : 1].output_bytes = 3e9;  // its output's gradient
    spec.edges = {{"a", "b", 1e6, 0}};
    const Graph g = *Graph::Build(std::move(spec));
    ClusterSpec cs;
    cs.devices.push_back({.id = "g", .host = "h", .flops = 1e12, .memory_bytes = 1e12});
    const Cluster c = *Cluster::Build(std::move(cs));
    const CostModel cost(g, c, {});
    auto stages = cost.Evaluate(std::vector<int>{0, 0}, std::vector<int>{0});
    ASSERT_TRUE(stages.ok());
    // First: a's 3e9 comes when b's 4e9 are gone (4e9 + 3e9 < 8e9), so b's
    // own working set (its output's and input's gradients, 1e6 each) is the
    // most. Last: all 8e9 and b's 3e9 + 1e6.
    EXPECT_NEAR((*stages)[0].workspace_bytes, big_first ? 2e6 : 3e9 + 1e6, 1) << big_first;
  }
}

TEST(CostModelTest, TheLossKeepsFp32LogProbabilitiesAndAGradientBuffer) {
  TensorFixture f({.tensor_scale = 0.5, .loss_workspace = true});
  auto stages = f.cost->Evaluate(std::vector<int>{0, 0, 0, 1}, std::vector<int>{0, 1});
  ASSERT_TRUE(stages.ok());
  // s is the sink: its inputs are 3e9 + 1e9 + 1e9 fp32 bytes, whatever the
  // precision of the rest.
  EXPECT_NEAR((*stages)[1].transient_bytes, 5e9, 1);
  EXPECT_NEAR((*stages)[1].activation_bytes, 5e8 * 0.5 + 5e9, 1);
  // Boundary buffers: stage 1 holds its received copies (3e9 + 1e9 + 1e9,
  // at 0.5) per microbatch in flight, and in the backward the gradients of
  // q's and r's (p's output 1 carries none); stage 0 its packed copies.
  EXPECT_NEAR((*stages)[1].received_bytes, 2.5e9, 1);
  EXPECT_NEAR((*stages)[1].received_grad_bytes, 1e9, 1);
  EXPECT_NEAR((*stages)[0].sent_bytes, 2.5e9, 1);
  EXPECT_NEAR((*stages)[1].peak_memory_bytes(2), 2 * (2.5e8 + 5e9) + 2 * 2.5e9 + 5e9 + 1e9, 1);
  // Transfers follow the precision.
  EXPECT_NEAR((*stages)[1].forward_comm_seconds, (3e9 + 1e9 + 1e9) * 0.5 / 1e9, 1e-9);
}

}  // namespace
}  // namespace pipeplan
