#include "pipeplan/server/rpc/training_spec.h"

#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pipeplan::server {
namespace {

absl::Status Bad(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("training.", field, ": ", what));
}

absl::Status CheckData(const std::string& data) {
  if (absl::StartsWith(data, "tensors:") && data.size() > 8) return absl::OkStatus();
  if (absl::StartsWith(data, "synthetic:seed=")) {
    int64_t seed = 0;
    if (absl::SimpleAtoi(data.substr(15), &seed) && seed >= 0) return absl::OkStatus();
  }
  return Bad("data", absl::StrCat("want tensors:FILE or synthetic:seed=N, got \"", data, "\""));
}

absl::Status CheckNumbers(const v1::TrainingSpec& spec) {
  if (!(spec.lr() > 0) || !std::isfinite(spec.lr())) {
    return Bad("lr", absl::StrCat("must be > 0, got ", spec.lr()));
  }
  if (spec.has_weight_decay() &&
      !(spec.weight_decay() >= 0 && std::isfinite(spec.weight_decay()))) {
    return Bad("weight_decay", absl::StrCat("must be >= 0, got ", spec.weight_decay()));
  }
  if (!(spec.momentum() >= 0 && spec.momentum() < 1)) {
    return Bad("momentum", absl::StrCat("must be in [0, 1), got ", spec.momentum()));
  }
  if (spec.momentum() > 0 && spec.optimizer() != "sgd") {
    return Bad("momentum", "only sgd takes a momentum");
  }
  if (!(spec.clip_grad_norm() >= 0) || !std::isfinite(spec.clip_grad_norm())) {
    return Bad("clip_grad_norm", absl::StrCat("must be >= 0, got ", spec.clip_grad_norm()));
  }
  if (spec.batch_size() < 1) {
    return Bad("batch_size", absl::StrCat("must be >= 1, got ", spec.batch_size()));
  }
  if (spec.max_steps() < 0) {
    return Bad("max_steps", absl::StrCat("must be >= 0, got ", spec.max_steps()));
  }
  if (spec.checkpoint_every() < 0) {
    return Bad("checkpoint_every", absl::StrCat("must be >= 0, got ", spec.checkpoint_every()));
  }
  if (spec.has_snapshot_every() && spec.snapshot_every() < 0) {
    return Bad("snapshot_every", absl::StrCat("must be >= 0, got ", spec.snapshot_every()));
  }
  if (spec.checkpoint_every() > 0 && spec.checkpoint_dir().empty()) {
    return Bad("checkpoint_dir", "is required with checkpoint_every");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyTrainingSpec(const v1::TrainingSpec& spec, v1::PlanRequest* request) {
  if (spec.ByteSizeLong() == 0) return absl::OkStatus();
  if (spec.model_package().empty()) return Bad("model_package", "is required");
  const std::string& opt = spec.optimizer();
  if (opt != "sgd" && opt != "adam" && opt != "adamw") {
    return Bad("optimizer", absl::StrCat("want sgd, adam or adamw, got \"", opt, "\""));
  }
  const std::string& loss = spec.loss();
  if (!loss.empty() && loss != "cross_entropy" && loss != "mse") {
    return Bad("loss", absl::StrCat("want cross_entropy or mse, got \"", loss, "\""));
  }
  const std::string& dtype = spec.dtype();
  if (!dtype.empty() && dtype != "float32" && dtype != "float64") {
    return Bad("dtype", absl::StrCat("want float32 or float64, got \"", dtype, "\""));
  }
  if (absl::Status s = CheckData(spec.data()); !s.ok()) return s;
  if (absl::Status s = CheckNumbers(spec); !s.ok()) return s;

  v1::PlanOptions* options = request->mutable_options();
  if (spec.batch_size() > (int64_t{1} << 30)) {
    return Bad("batch_size", absl::StrCat("must be at most 2^30, got ", spec.batch_size()));
  }
  const int batch = static_cast<int>(spec.batch_size());
  if (options->global_batch() > 0 && options->global_batch() != batch) {
    return absl::InvalidArgumentError(absl::StrCat("options.global_batch ", options->global_batch(),
                                                   " differs from training.batch_size ", batch));
  }
  if (options->microbatches() > 0 && batch % options->microbatches() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("training.batch_size ", batch,
                                                   " is not divisible by options.microbatches ",
                                                   options->microbatches()));
  }
  options->set_global_batch(batch);
  return PlanForTheTraining(spec, options);
}

absl::Status PlanForTheTraining(const v1::TrainingSpec& spec, v1::PlanOptions* options) {
  if (spec.ByteSizeLong() == 0) return absl::OkStatus();
  // What the torch executor keeps: the optimizer's state (sgd with momentum
  // one buffer, adam(w) two) in training.dtype, and that dtype's weights,
  // gradients, activations and transfers.
  const v1::Optimizer optimizer =
      spec.optimizer() == "sgd" ? (spec.momentum() > 0 ? v1::OPTIMIZER_MOMENTUM : v1::OPTIMIZER_SGD)
                                : v1::OPTIMIZER_ADAM;
  const v1::Precision precision =
      spec.dtype() == "float64" ? v1::PRECISION_FP64 : v1::PRECISION_FP32;
  if (options->optimizer() != v1::OPTIMIZER_DEFAULT && options->optimizer() != optimizer) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.optimizer ", v1::Optimizer_Name(options->optimizer()),
                     " is not what the workers run: training.optimizer \"", spec.optimizer(), "\"",
                     spec.momentum() > 0 ? " with momentum" : "", " keeps ",
                     v1::Optimizer_Name(optimizer), "'s state (leave options.optimizer unset)"));
  }
  if (options->precision() != v1::PRECISION_DEFAULT && options->precision() != precision) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.precision ", v1::Precision_Name(options->precision()),
                     " is not what the workers run: training.dtype \"",
                     spec.dtype().empty() ? "float32" : spec.dtype(), "\" trains in ",
                     v1::Precision_Name(precision), " (leave options.precision unset)"));
  }
  options->set_optimizer(optimizer);
  options->set_precision(precision);
  return absl::OkStatus();
}

}  // namespace pipeplan::server
