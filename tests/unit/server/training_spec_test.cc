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
  // float64 training is planned in fp64.
  v1::TrainingSpec f64 = Valid();
  f64.set_dtype("float64");
  request = {};
  ASSERT_TRUE(ApplyTrainingSpec(f64, &request).ok());
  EXPECT_EQ(request.options().precision(), v1::PRECISION_FP64);
  // A request may restate what runs, not plan for something else.
  request = {};
  request.mutable_options()->set_optimizer(v1::OPTIMIZER_ADAM);
  request.mutable_options()->set_precision(v1::PRECISION_FP32);
  EXPECT_TRUE(ApplyTrainingSpec(Valid(), &request).ok());
}

TEST(ApplyTrainingSpec, APlanForAnotherTrainingIsRejected) {
  v1::PlanRequest request;
  request.mutable_options()->set_optimizer(v1::OPTIMIZER_SGD);
  std::string error = ErrorOf(Valid(), request);
  EXPECT_NE(error.find("options.optimizer OPTIMIZER_SGD"), std::string::npos) << error;
  EXPECT_NE(error.find("OPTIMIZER_ADAM"), std::string::npos) << error;
  request = {};
  request.mutable_options()->set_precision(v1::PRECISION_BF16_MIXED);
  error = ErrorOf(Valid(), request);
  EXPECT_NE(error.find("training.dtype \"float32\" trains in PRECISION_FP32"), std::string::npos)
      << error;
  // The replan's path: new options of the same training.
  v1::PlanOptions options;
  options.set_precision(v1::PRECISION_FP32);
  v1::TrainingSpec f64 = Valid();
  f64.set_dtype("float64");
  EXPECT_EQ(PlanForTheTraining(f64, &options).code(), absl::StatusCode::kInvalidArgument);
  options.clear_precision();
  ASSERT_TRUE(PlanForTheTraining(f64, &options).ok());
  EXPECT_EQ(options.precision(), v1::PRECISION_FP64);
  EXPECT_EQ(options.optimizer(), v1::OPTIMIZER_ADAM);
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
