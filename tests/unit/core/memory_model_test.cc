// Bytes per parameter by optimizer and precision, and what the planner does
// when memory binds: recompute activations, fit only in bf16, or refuse
// naming the memory a device would need.
#include "pipeplan/core/memory_model.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/core/planner.h"

namespace pipeplan {
namespace {

using schedule::ScheduleKind;
using ::testing::HasSubstr;

TEST(MemoryModel, BytesPerParameterByOptimizerAndPrecision) {
  // Per 4-byte parameter: weights + gradients + state.
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kSgd, Precision::kFp32).param_state_factor, 2);
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kMomentum, Precision::kFp32).param_state_factor, 3);
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kAdam, Precision::kFp32).param_state_factor, 4);
  // bf16 weights (2) + bf16 gradients (2) + fp32 master (4) + two fp32
  // moments (8) = 16 bytes, 4x the fp32 parameter.
  const TrainingMemory mixed = TrainingMemoryFor(Optimizer::kAdam, Precision::kBf16Mixed);
  EXPECT_DOUBLE_EQ(mixed.param_state_factor, 4);
  EXPECT_DOUBLE_EQ(mixed.tensor_scale, 0.5);
  EXPECT_DOUBLE_EQ(mixed.gradient_scale, 0.5);
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kAdam, Precision::kFp32).tensor_scale, 1);
  // A graph exported in bf16 (2 bytes per element): Adam's 16 bytes are 8
  // per graph byte; fp32 activations twice the graph's.
  EXPECT_DOUBLE_EQ(
      TrainingMemoryFor(Optimizer::kAdam, Precision::kBf16Mixed, 0, 2).param_state_factor, 8);
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kSgd, Precision::kFp32, 0, 2).tensor_scale, 2);
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kSgd, Precision::kBf16Mixed, 0, 2).tensor_scale, 1);
  // fp64 (a float64 training job): 8 + 8 bytes and fp64 state buffers, 2x fp32.
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kSgd, Precision::kFp64).param_state_factor, 4);
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kMomentum, Precision::kFp64).param_state_factor, 6);
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kAdam, Precision::kFp64).param_state_factor, 8);
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kAdam, Precision::kFp64).tensor_scale, 2);
  EXPECT_EQ(*ParsePrecision("fp64"), Precision::kFp64);
  // An explicit multiplier keeps its old meaning.
  EXPECT_DOUBLE_EQ(TrainingMemoryFor(Optimizer::kAdam, Precision::kFp32, 6).param_state_factor, 8);
  // The defaults are AdamW in bf16.
  EXPECT_EQ(PlanOptions{}.optimizer, Optimizer::kAdam);
  EXPECT_EQ(PlanOptions{}.precision, Precision::kBf16Mixed);
  EXPECT_EQ(*ParseOptimizer("AdamW"), Optimizer::kAdam);
  EXPECT_EQ(*ParsePrecision("bf16-mixed"), Precision::kBf16Mixed);
  EXPECT_FALSE(ParseOptimizer("lion").ok());
  EXPECT_FALSE(ParsePrecision("fp8").ok());
}

// Four equal layers whose activations dwarf their parameters, on two
// devices of `memory` bytes.
struct Instance {
  explicit Instance(double memory, double activation = 4e9) {
    GraphSpec g{.name = "wide", .batch_size = 0};
    for (int v = 0; v < 4; ++v) {
      g.nodes.push_back({.id = absl::StrCat("l", v),
                         .forward_flops = 1e12,
                         .param_bytes = 1e8,
                         .activation_bytes = activation,
                         .output_bytes = 1e8});
      if (v > 0) g.edges.push_back({absl::StrCat("l", v - 1), absl::StrCat("l", v), 0});
    }
    graph = std::make_unique<Graph>(*Graph::Build(std::move(g)));
    ClusterSpec c;
    for (int d = 0; d < 2; ++d) c.devices.push_back({absl::StrCat("g", d), "h", 1e14, memory});
    cluster = std::make_unique<Cluster>(*Cluster::Build(std::move(c)));
  }
  absl::StatusOr<PlanResult> Plan(Precision precision) const {
    return MakePlan(*graph, *cluster,
                    {.num_ranks = 2,
                     .num_replicas = 1,
                     .microbatches = 8,
                     .precision = precision,
                     .schedule = ScheduleKind::k1F1B,
                     .method = PartitionMethod::kDp});
  }
  std::unique_ptr<Graph> graph;
  std::unique_ptr<Cluster> cluster;
};

TEST(MemoryModel, RecomputesOnlyWhereMemoryNeedsIt) {
  // fp32, 1F1B, two layers a stage: stage 0 holds 2 microbatches of 2 x 4e9
  // = 16e9 bytes, stage 1 one (8e9 + the loss's fp32 buffers); other splits
  // put three layers on a stage. 12e9 per device fits stage 1 as is; stage 0
  // must recompute (it keeps one microbatch's 8e9; its input is the data).
  Instance in(12e9);
  absl::StatusOr<PlanResult> plan = in.Plan(Precision::kFp32);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stage_recompute.size(), 2u);
  EXPECT_TRUE(plan->stage_recompute[0]);
  EXPECT_FALSE(plan->stage_recompute[1]);
  for (int s = 0; s < 2; ++s) EXPECT_LE(plan->stage_peak_memory[s], 12e9);
  // Recomputing costs stage 0 one more forward in its backward.
  const StageCost& st = plan->partition.stages[0];
  EXPECT_TRUE(st.recompute);
  EXPECT_NEAR(st.backward_seconds, 2 * st.forward_seconds + st.forward_seconds, 1e-9);
}

TEST(MemoryModel, FitsOnlyInBf16) {
  // One microbatch of a stage's fp32 activations (2 x 9e9) is more than a
  // device holds, recomputing or not; in bf16 it is half.
  Instance in(16e9, 9e9);
  absl::StatusOr<PlanResult> fp32 = in.Plan(Precision::kFp32);
  ASSERT_FALSE(fp32.ok());
  EXPECT_EQ(fp32.status().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<PlanResult> bf16 = in.Plan(Precision::kBf16Mixed);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  for (double bytes : bf16->stage_peak_memory) EXPECT_LE(bytes, 16e9);
}

TEST(MemoryModel, NothingFitsNamesTheMemoryADeviceNeeds) {
  Instance in(2e9);
  absl::StatusOr<PlanResult> plan = in.Plan(Precision::kBf16Mixed);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(plan.status().message());
  EXPECT_THAT(message, HasSubstr("GiB per device"));
  // "... needs about X GiB per device (Y bytes) ...": Y is more than a
  // device has and at least what one stage must hold recomputing.
  const size_t open = message.find("per device (");
  ASSERT_NE(open, std::string::npos);
  double needed = 0;
  ASSERT_TRUE(absl::SimpleAtod(message.substr(open + 12, message.find(' ', open + 12) - open - 12),
                               &needed));
  EXPECT_GT(needed, 2e9);
  EXPECT_GE(needed, 4e9 * 0.5 * 2);  // one microbatch of two layers' activations
}

}  // namespace
}  // namespace pipeplan
