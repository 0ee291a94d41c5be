#include "training_flags.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/core/status_macros.h"
#include "pipeplan/worker/model_package.h"

namespace pipeplan::cli {
namespace {

std::string Absolute(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

absl::StatusOr<int64_t> GetInt64(const Flags& flags, const std::string& name, int64_t fallback) {
  std::optional<std::string> v = flags.Get(name);
  if (!v) return fallback;
  int64_t out = 0;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " wants an integer, got \"", *v, "\""));
  }
  return out;
}

// tensors:FILE names a file the CLI can check exists; synthetic needs nothing.
absl::StatusOr<std::string> DataFlag(const Flags& flags) {
  const std::optional<std::string> data = flags.Get("data");
  if (!data) return absl::InvalidArgumentError("--data is required with --model-package");
  if (absl::StartsWith(*data, "tensors:")) {
    const std::string file = data->substr(8);
    if (!std::filesystem::is_regular_file(file)) {
      return absl::InvalidArgumentError(absl::StrCat("--data: no file ", file));
    }
    return absl::StrCat("tensors:", Absolute(file));
  }
  return *data;
}

}  // namespace

const std::set<std::string>& TrainingFlagNames() {
  static const std::set<std::string> kNames = {
      "model-package",  "loss", "optimizer",  "lr",        "weight-decay",   "momentum",
      "clip-grad-norm", "data", "batch-size", "max-steps", "checkpoint-dir", "checkpoint-every",
      "dtype"};
  return kNames;
}

const std::set<std::string>& TrainingSwitchNames() {
  static const std::set<std::string> kNames = {"skip-nonfinite-steps"};
  return kNames;
}

absl::StatusOr<std::optional<v1::TrainingSpec>> TrainingSpecFromFlags(const Flags& flags,
                                                                      const v1::ModelGraph& graph) {
  if (!flags.Has("model-package")) {
    for (const std::string& name : TrainingFlagNames()) {
      if (flags.Has(name)) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs --model-package"));
      }
    }
    return std::nullopt;
  }
  v1::TrainingSpec spec;
  spec.set_model_package(Absolute(*flags.Get("model-package")));
  PIPEPLAN_ASSIGN_OR_RETURN(worker::ModelPackage package,
                            worker::ReadModelPackage(spec.model_package()));
  std::vector<std::string> graph_nodes;
  for (const v1::Node& node : graph.nodes()) graph_nodes.push_back(node.id());
  PIPEPLAN_RETURN_IF_ERROR(worker::CheckPackageMatchesGraph(package, graph_nodes));
  spec.set_package_digest(package.digest);
  spec.set_loss(flags.Get("loss").value_or(package.loss));
  spec.set_optimizer(flags.Get("optimizer").value_or("adamw"));
  PIPEPLAN_ASSIGN_OR_RETURN(double lr, flags.GetDouble("lr", 1e-3));
  spec.set_lr(lr);
  if (flags.Has("weight-decay")) {
    PIPEPLAN_ASSIGN_OR_RETURN(double wd, flags.GetDouble("weight-decay", 0));
    spec.set_weight_decay(wd);
  }
  PIPEPLAN_ASSIGN_OR_RETURN(double momentum, flags.GetDouble("momentum", 0));
  spec.set_momentum(momentum);
  PIPEPLAN_ASSIGN_OR_RETURN(double clip, flags.GetDouble("clip-grad-norm", 0));
  spec.set_clip_grad_norm(clip);
  PIPEPLAN_ASSIGN_OR_RETURN(std::string data, DataFlag(flags));
  spec.set_data(data);
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t batch, GetInt64(flags, "batch-size", 0));
  if (batch < 1) return absl::InvalidArgumentError("--batch-size is required (rows per step)");
  spec.set_batch_size(batch);
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t max_steps, GetInt64(flags, "max-steps", 0));
  spec.set_max_steps(max_steps);
  if (flags.Has("checkpoint-dir")) spec.set_checkpoint_dir(Absolute(*flags.Get("checkpoint-dir")));
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t every, GetInt64(flags, "checkpoint-every", 0));
  spec.set_checkpoint_every(every);
  spec.set_skip_nonfinite_steps(flags.Has("skip-nonfinite-steps"));
  spec.set_dtype(flags.Get("dtype").value_or("float32"));
  return spec;
}

}  // namespace pipeplan::cli
