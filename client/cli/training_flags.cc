#include "training_flags.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/client/model_package.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan::cli {
namespace {

std::string Absolute(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

// tensors:FILE names a file the CLI can check exists; synthetic needs nothing.
absl::StatusOr<std::string> DataFlag(const common::ParsedFlags& flags) {
  const std::optional<std::string> data = flags.Get("data");
  if (!data) return common::UsageError("--data is required with --model-package");
  if (absl::StartsWith(*data, "tensors:")) {
    const std::string file = data->substr(8);
    if (!std::filesystem::is_regular_file(file)) {
      return common::UsageError(absl::StrCat("--data: no file ", file));
    }
    return absl::StrCat("tensors:", Absolute(file));
  }
  return *data;
}

}  // namespace

const common::FlagSet& TrainingFlags() {
  static const common::FlagSet* flags = [] {
    auto* f = new common::FlagSet("pipeplan");
    f->Section("training flags (workers with --executor torch train the model)")
        .Value("model-package", "DIR",
               "pipeplan_export.py --package output (checked against --graph)")
        .Value("data", "SOURCE", "tensors:FILE or synthetic:seed=N")
        .Value("batch-size", "B", "rows per step")
        .Value("optimizer", "NAME", "sgd, adam or adamw (adamw)")
        .Value("lr", "X", "learning rate (1e-3)")
        .Value("weight-decay", "X", "(0 for sgd and adam, 0.01 for adamw)")
        .Value("momentum", "X", "sgd momentum (0)")
        .Value("clip-grad-norm", "X", "global L2 norm to clip gradients to (0: off)")
        .Value("loss", "NAME", "cross_entropy or mse (the package's)")
        .Value("max-steps", "N", "steps to train (0: until stopped)")
        .Value("checkpoint-dir", "DIR", "where checkpoints go (none without it)")
        .Value("checkpoint-every", "N", "steps between checkpoints")
        .Value("snapshot-every", "N",
               "steps between in-memory peer snapshots (1: every step; 0: off)")
        .Value("dtype", "NAME", "float32 (default) or float64")
        .Value("seed", "N",
               "seeds random operators such as dropout (0); the reference\n"
               "trainer's --seed")
        .Switch("skip-nonfinite-steps", "skip a step whose loss is NaN/inf instead of failing");
    return f;
  }();
  return *flags;
}

absl::StatusOr<std::optional<v1::TrainingSpec>> TrainingSpecFromFlags(
    const common::ParsedFlags& flags, const v1::ModelGraph& graph) {
  if (!flags.Has("model-package")) {
    for (const common::FlagSpec& f : TrainingFlags().flags()) {
      // --optimizer is also a planning flag (the memory model's optimizer).
      if (flags.Has(f.name) && f.name != "optimizer") {
        return common::UsageError(absl::StrCat("--", f.name, " needs --model-package"));
      }
    }
    return std::nullopt;
  }
  v1::TrainingSpec spec;
  spec.set_model_package(Absolute(*flags.Get("model-package")));
  PIPEPLAN_ASSIGN_OR_RETURN(ModelPackage package, ReadModelPackage(spec.model_package()));
  std::vector<std::string> graph_nodes;
  for (const v1::Node& node : graph.nodes()) graph_nodes.push_back(node.id());
  PIPEPLAN_RETURN_IF_ERROR(CheckPackageMatchesGraph(package, graph_nodes));
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
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t batch, flags.GetInt64("batch-size", 0));
  if (batch < 1) return common::UsageError("--batch-size is required (rows per step)");
  spec.set_batch_size(batch);
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t max_steps, flags.GetInt64("max-steps", 0));
  spec.set_max_steps(max_steps);
  if (flags.Has("checkpoint-dir")) spec.set_checkpoint_dir(Absolute(*flags.Get("checkpoint-dir")));
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t every, flags.GetInt64("checkpoint-every", 0));
  spec.set_checkpoint_every(every);
  if (flags.Has("snapshot-every")) {
    PIPEPLAN_ASSIGN_OR_RETURN(int64_t snapshot_every, flags.GetInt64("snapshot-every", 1));
    spec.set_snapshot_every(snapshot_every);
  }
  spec.set_skip_nonfinite_steps(flags.Has("skip-nonfinite-steps"));
  spec.set_dtype(flags.Get("dtype").value_or("float32"));
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt64("seed", 0));
  spec.set_seed(seed);
  return spec;
}

}  // namespace pipeplan::cli
