#include "pipeplan/worker/executor_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/mlp_executor.h"
#include "pipeplan/worker/synthetic_executor.h"

namespace pipeplan::worker {
namespace {

std::unique_ptr<Executor> MakeSynthetic(const WorkerOptions& o, const StagePlan& plan,
                                        const ExecutorPlace& place) {
  SyntheticOptions so;
  so.forward_seconds = plan.forward_seconds;
  so.backward_seconds = plan.backward_seconds;
  so.boundary_bytes = plan.boundary_bytes;
  so.time_scale = o.time_scale;
  so.time_factor = plan.time_factor;
  so.slowdown = o.slowdown;
  so.max_message_bytes = o.max_message_bytes;
  so.replica_group = place.replica_group;
  so.comm_timeout = o.comm_timeout;
  for (int s = 0; s < plan.num_stages; ++s) {
    if (plan.lowered.stage_to_rank[s] == place.rank &&
        s < static_cast<int>(plan.param_bytes.size())) {
      so.gradient_bytes += plan.param_bytes[s];
    }
  }
  return std::make_unique<SyntheticExecutor>(std::move(so));
}

absl::StatusOr<std::unique_ptr<Executor>> MakeMlp(const WorkerOptions& o, const StagePlan& plan,
                                                  const v1::ModelGraph& graph, int rank) {
  if (plan.stage_nodes.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("plan version ", plan.version, " has no graph to build the mlp from"));
  }
  MlpOptions mo;
  mo.layers = LayersFromGraph(graph);
  mo.stage_layers = plan.stage_nodes;
  for (int s = 0; s < plan.num_stages; ++s) {
    if (plan.lowered.stage_to_rank[s] == rank) mo.local_stages.push_back(s);
  }
  mo.num_microbatches = plan.microbatches;
  mo.width = o.mlp_width;
  mo.rows = o.mlp_rows;
  mo.learning_rate = o.mlp_learning_rate;
  return std::make_unique<MlpExecutor>(std::move(mo));
}

}  // namespace

absl::Status CheckExecutorOptions(const WorkerOptions& options) {
  if (options.executor == "torch") {
#ifdef PIPEPLAN_HAVE_TORCH
    return absl::OkStatus();
#else
    return absl::FailedPreconditionError(
        "--executor torch: this pipeplan-worker was built without LibTorch");
#endif
  }
  if (options.executor != "synthetic" && options.executor != "mlp") {
    return absl::InvalidArgumentError(
        absl::StrCat("--executor must be synthetic, mlp or torch, got \"", options.executor, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const WorkerOptions& options,
                                                       const StagePlan& plan,
                                                       const v1::ModelGraph& graph,
                                                       const ExecutorPlace& place) {
  PIPEPLAN_RETURN_IF_ERROR(CheckExecutorOptions(options));
  if (options.executor == "torch") {
    return absl::FailedPreconditionError("the torch executor is built by the training session");
  }
  if (options.executor == "mlp") {
    if (plan.num_replicas > 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("plan version ", plan.version, " has ", plan.num_replicas,
                       " replicas; the mlp executor runs one (use synthetic or torch)"));
    }
    return MakeMlp(options, plan, graph, place.rank);
  }
  return MakeSynthetic(options, plan, place);
}

}  // namespace pipeplan::worker
