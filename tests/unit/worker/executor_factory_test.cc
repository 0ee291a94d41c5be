// The one executor factory (pipeplan/worker/executors/executor_factory.h):
// the only code that knows the executor names, and what it refuses.
#include "pipeplan/worker/executors/executor_factory.h"

#include "gtest/gtest.h"

namespace pipeplan::worker {
namespace {

WorkerOptions With(const std::string& executor) {
  WorkerOptions o;
  o.executor = executor;
  return o;
}

TEST(ExecutorFactory, KnowsEveryExecutorByName) {
  EXPECT_EQ(*ExecutorKindOf(With("synthetic")), ExecutorKind::kSynthetic);
  EXPECT_EQ(*ExecutorKindOf(With("mlp")), ExecutorKind::kMlp);
#ifdef PIPEPLAN_HAVE_TORCH
  EXPECT_EQ(*ExecutorKindOf(With("torch")), ExecutorKind::kTorch);
#else
  EXPECT_EQ(ExecutorKindOf(With("torch")).status().code(), absl::StatusCode::kFailedPrecondition);
#endif
  const absl::Status bad = CheckExecutorOptions(With("tpu"));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--executor"), std::string::npos) << bad;
}

TEST(ExecutorFactory, MakesTheSyntheticExecutorAndRefusesTorchWithoutItsInputs) {
  StagePlan plan;
  plan.num_stages = 1;
  plan.num_ranks = 1;
  plan.num_microbatches = 1;
  plan.lowered.stage_to_rank = {0};
  auto synthetic = MakeExecutor(With("synthetic"), plan, v1::ModelGraph(), ExecutorPlace{});
  ASSERT_TRUE(synthetic.ok()) << synthetic.status();
  EXPECT_NE(*synthetic, nullptr);
  // The torch executor needs the training session's package, spec and
  // compiled stages.
  auto torch = MakeExecutor(With("torch"), plan, v1::ModelGraph(), ExecutorPlace{});
  EXPECT_EQ(torch.status().code(), absl::StatusCode::kFailedPrecondition);
  // The mlp executor builds from the plan's graph, which this plan lacks.
  auto mlp = MakeExecutor(With("mlp"), plan, v1::ModelGraph(), ExecutorPlace{});
  EXPECT_EQ(mlp.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ExecutorFactory, SamplesPerStepComeFromTheMlpRowsOrTheRequestBatch) {
  StagePlan plan;
  plan.num_microbatches = 4;
  WorkerOptions mlp = With("mlp");
  mlp.mlp_rows = 8;
  EXPECT_EQ(SamplesPerStep(mlp, plan, 100), 32);
  EXPECT_EQ(SamplesPerStep(With("synthetic"), plan, 100), 100);
}

}  // namespace
}  // namespace pipeplan::worker
