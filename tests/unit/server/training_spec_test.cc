#include "pipeplan/server/rpc/training_spec.h"

#include <gtest/gtest.h>

#include <string>

namespace pipeplan::server {
namespace {

v1::TrainingSpec Valid() {
  v1::TrainingSpec t;
  t.set_model_package("/pkg");
  t.set_optimizer("adamw");
  t.set_lr(3e-4);
  t.set_data("tensors:/data/train.pt");
  t.set_batch_size(32);
  return t;
}

// The field named in the error of `spec` (empty when accepted).
std::string ErrorOf(const v1::TrainingSpec& spec, v1::PlanRequest request = {}) {
  absl::Status s = ApplyTrainingSpec(spec, &request);
  if (s.ok()) return "";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(ApplyTrainingSpec, EmptySpecLeavesTheRequestAlone) {
  v1::PlanRequest request;
  request.mutable_options()->set_microbatches(3);
  ASSERT_TRUE(ApplyTrainingSpec(v1::TrainingSpec(), &request).ok());
  EXPECT_EQ(request.options().global_batch(), 0);
}

TEST(ApplyTrainingSpec, PlansForTheTrainingBatch) {
  v1::PlanRequest request;
  request.mutable_options()->set_microbatches(4);
  ASSERT_TRUE(ApplyTrainingSpec(Valid(), &request).ok());
  EXPECT_EQ(request.options().global_batch(), 32);
}

TEST(ApplyTrainingSpec, PlansForTheTrainingsMemory) {
  v1::PlanRequest request;
  ASSERT_TRUE(ApplyTrainingSpec(Valid(), &request).ok());
  EXPECT_EQ(request.options().optimizer(), v1::OPTIMIZER_ADAM);
  EXPECT_EQ(request.options().precision(), v1::PRECISION_FP32);
  v1::TrainingSpec sgd = Valid();
  sgd.set_optimizer("sgd");
  sgd.set_momentum(0.9);
  request = {};
  ASSERT_TRUE(ApplyTrainingSpec(sgd, &request).ok());
  EXPECT_EQ(request.options().optimizer(), v1::OPTIMIZER_MOMENTUM);
  // What the request states wins.
  request = {};
  request.mutable_options()->set_optimizer(v1::OPTIMIZER_SGD);
  request.mutable_options()->set_precision(v1::PRECISION_BF16_MIXED);
  ASSERT_TRUE(ApplyTrainingSpec(Valid(), &request).ok());
  EXPECT_EQ(request.options().optimizer(), v1::OPTIMIZER_SGD);
  EXPECT_EQ(request.options().precision(), v1::PRECISION_BF16_MIXED);
}

TEST(ApplyTrainingSpec, ErrorsNameTheField) {
  auto with = [](auto edit) {
    v1::TrainingSpec t = Valid();
    edit(t);
    return ErrorOf(t);
  };
  EXPECT_EQ(ErrorOf(Valid()), "");
  EXPECT_NE(with([](auto& t) { t.clear_model_package(); }).find("training.model_package"),
            std::string::npos);
  EXPECT_NE(with([](auto& t) { t.set_optimizer("lamb"); }).find("training.optimizer"),
            std::string::npos);
  EXPECT_NE(with([](auto& t) { t.set_loss("hinge"); }).find("training.loss"), std::string::npos);
  EXPECT_NE(with([](auto& t) { t.set_lr(0); }).find("training.lr"), std::string::npos);
  EXPECT_NE(with([](auto& t) { t.set_data("s3://x"); }).find("training.data"), std::string::npos);
  EXPECT_NE(with([](auto& t) { t.set_data("synthetic:seed=x"); }).find("training.data"),
            std::string::npos);
  EXPECT_NE(with([](auto& t) { t.set_batch_size(0); }).find("training.batch_size"),
            std::string::npos);
  EXPECT_NE(with([](auto& t) { t.set_momentum(0.9); }).find("training.momentum"),
            std::string::npos);
  EXPECT_NE(with([](auto& t) { t.set_checkpoint_every(10); }).find("training.checkpoint_dir"),
            std::string::npos);
  EXPECT_NE(with([](auto& t) { t.set_dtype("int8"); }).find("training.dtype"), std::string::npos);
  v1::PlanRequest request;
  request.mutable_options()->set_microbatches(5);
  EXPECT_NE(ErrorOf(Valid(), request).find("options.microbatches 5"), std::string::npos);
  request.mutable_options()->set_microbatches(0);
  request.mutable_options()->set_global_batch(64);
  EXPECT_NE(ErrorOf(Valid(), request).find("options.global_batch 64"), std::string::npos);
}

}  // namespace
}  // namespace pipeplan::server
