// The reference MLP split over 2 ranks talking through real Gloo TCP pairs on
// 127.0.0.1 computes the same losses and weights as one process running all
// layers, and its loss decreases.
#include <cmath>
#include <thread>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/worker/executors/mlp_executor.h"
#include "pipeplan/worker/runtime/runtime.h"
#include "pipeplan/worker/transport/gloo_transport.h"
#include "pipeplan/worker/transport/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

using schedule::ScheduleKind;

const std::vector<LayerKind> kLayers = {LayerKind::kIdentity, LayerKind::kLinear,
                                        LayerKind::kTanh,     LayerKind::kLinear,
                                        LayerKind::kTanh,     LayerKind::kLinear};
constexpr int kMicrobatches = 4;
constexpr int kSteps = 8;

MlpOptions Options(std::vector<std::vector<int>> stages, std::vector<int> local) {
  MlpOptions o;
  o.layers = kLayers;
  o.stage_layers = std::move(stages);
  o.local_stages = std::move(local);
  o.num_microbatches = kMicrobatches;
  o.width = 8;
  o.rows = 4;
  o.learning_rate = 1.0f;
  return o;
}

StageRuntime MakeRuntime(const schedule::PipelineSchedule& lowered, int rank) {
  auto r = StageRuntime::ForRank(lowered, rank, absl::Seconds(20));
  EXPECT_TRUE(r.ok()) << r.status();
  return std::move(*r);
}

TEST(MlpExecutor, TwoGlooRanksMatchSingleProcessReference) {
  // Reference: every layer on one stage, one rank.
  auto ref_sched =
      schedule::InsertSendRecv(*schedule::BuildSchedule(ScheduleKind::kGPipe, 1, kMicrobatches));
  ASSERT_TRUE(ref_sched.ok());
  MlpExecutor ref(Options({{0, 1, 2, 3, 4, 5}}, {0}));
  MemoryHub hub(1);
  auto ref_transport = hub.Connect(0);
  StageRuntime ref_runtime = MakeRuntime(*ref_sched, 0);
  std::vector<double> ref_losses;
  for (int s = 0; s < kSteps; ++s) {
    ASSERT_TRUE(ref_runtime.RunStep(s, *ref_transport, ref).ok());
    ref_losses.push_back(*ref.LastLoss());
  }
  for (size_t i = 1; i < ref_losses.size(); ++i) EXPECT_LT(ref_losses[i], ref_losses[i - 1]);
  EXPECT_LT(ref_losses.back(), ref_losses.front() * 0.9);

  // Pipelined: stages {0,1,2} and {3,4,5} on two ranks, 1F1B, Gloo over TCP.
  auto sched =
      schedule::InsertSendRecv(*schedule::BuildSchedule(ScheduleKind::k1F1B, 2, kMicrobatches));
  ASSERT_TRUE(sched.ok());
  gloo::rendezvous::HashStore store;
  std::vector<std::unique_ptr<MlpExecutor>> ex;
  ex.push_back(std::make_unique<MlpExecutor>(Options({{0, 1, 2}, {3, 4, 5}}, {0})));
  ex.push_back(std::make_unique<MlpExecutor>(Options({{0, 1, 2}, {3, 4, 5}}, {1})));
  std::vector<absl::Status> status(2);
  std::vector<double> losses;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto t = ConnectGloo(
          {.rank = r, .size = 2, .host = "127.0.0.1", .timeout = absl::Seconds(20)}, store);
      if (!t.ok()) {
        status[r] = t.status();
        return;
      }
      StageRuntime runtime = MakeRuntime(*sched, r);
      for (int s = 0; s < kSteps; ++s) {
        auto v = (*t)->AllReduceMax(r, absl::Seconds(10));  // as the daemon does
        if (!v.ok() || *v != 1) {
          status[r] = v.ok() ? absl::InternalError("bad all-reduce") : v.status();
          return;
        }
        auto res = runtime.RunStep(s, **t, *ex[r]);
        if (!res.ok()) {
          status[r] = res.status();
          return;
        }
        if (r == 1) losses.push_back(*ex[r]->LastLoss());
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  EXPECT_FALSE(ex[0]->LastLoss().has_value());  // only the last stage has a loss
  ASSERT_EQ(losses.size(), ref_losses.size());
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i], ref_losses[i], 1e-5);
  for (const auto& [layer, p] : ref.parameters()) {
    const MlpExecutor& owner = layer <= 2 ? *ex[0] : *ex[1];
    ASSERT_TRUE(owner.parameters().contains(layer));
    const std::vector<float>& q = owner.parameters().at(layer);
    ASSERT_EQ(p.size(), q.size());
    for (size_t i = 0; i < p.size(); ++i) ASSERT_NEAR(p[i], q[i], 1e-5) << "layer " << layer;
  }
}

TEST(MlpExecutor, LayersFromGraph) {
  v1::ModelGraph g;
  auto* n = g.add_nodes();
  n->set_id("input");
  n->set_op("placeholder");
  n = g.add_nodes();
  n->set_id("fc");
  n->set_param_bytes(100);
  n = g.add_nodes();
  n->set_id("act");
  n->set_op("gelu");
  EXPECT_EQ(LayersFromGraph(g),
            (std::vector<LayerKind>{LayerKind::kIdentity, LayerKind::kLinear, LayerKind::kTanh}));
}

}  // namespace
}  // namespace pipeplan::worker
