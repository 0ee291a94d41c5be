#include "pipeplan/worker/executors/executor_factory.h"

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/executors/mlp_executor.h"
#include "pipeplan/worker/executors/synthetic_executor.h"
#include "pipeplan/worker/transport/nccl_transport.h"
#ifdef PIPEPLAN_HAVE_TORCH
#include "pipeplan/worker/torch/torch_devices.h"
#include "pipeplan/worker/torch/torch_executor.h"
#endif

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
  so.noise = o.noise;
  so.noise_seed = std::hash<std::string>{}(o.worker_id);
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
  if (plan.num_replicas > 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("plan version ", plan.version, " has ", plan.num_replicas,
                     " replicas; the mlp executor runs one (use synthetic or torch)"));
  }
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
  mo.num_microbatches = plan.num_microbatches;
  mo.width = o.mlp_width;
  mo.rows = o.mlp_rows;
  mo.learning_rate = o.mlp_learning_rate;
  return std::make_unique<MlpExecutor>(std::move(mo));
}

#ifdef PIPEPLAN_HAVE_TORCH
OptimizerOptions OptimizerOf(const v1::TrainingSpec& spec) {
  OptimizerOptions o;
  o.kind = spec.optimizer();
  o.lr = spec.lr();
  o.momentum = spec.momentum();
  if (spec.has_weight_decay()) o.weight_decay = spec.weight_decay();
  o.clip_grad_norm = spec.clip_grad_norm();
  return o;
}

absl::StatusOr<std::unique_ptr<Executor>> MakeTorch(const WorkerOptions& options,
                                                    const StagePlan& plan,
                                                    const ExecutorPlace& place, TorchInputs& in) {
  const v1::TrainingSpec& spec = *in.spec;
  TorchExecutorOptions o;
  o.package = *in.package;
  o.stages = std::move(in.stages);
  o.stage_to_rank = plan.lowered.stage_to_rank;
  o.rank = place.rank;
  o.replica = place.replica;
  o.num_replicas = plan.num_replicas;
  o.num_microbatches = plan.num_microbatches;
  o.data = spec.data();
  o.loss = spec.loss();
  o.optimizer = OptimizerOf(spec);
  o.skip_nonfinite_steps = spec.skip_nonfinite_steps();
  o.recompute = plan.recompute;
  if (plan.allreduce_bucket_bytes > 0) o.allreduce_bucket_bytes = plan.allreduce_bucket_bytes;
  if (!spec.dtype().empty()) o.dtype = spec.dtype();
  o.seed = spec.seed();
  o.device = place.torch_device;
  o.deterministic = options.deterministic;
  o.transport = place.pipeline;
  o.replica_group = place.replica_group;
  o.comm_timeout = options.comm_timeout;
  PIPEPLAN_ASSIGN_OR_RETURN(std::unique_ptr<TorchExecutor> executor,
                            TorchExecutor::Create(std::move(o)));
  return std::unique_ptr<Executor>(std::move(executor));
}
#endif

}  // namespace

absl::StatusOr<ExecutorKind> ExecutorKindOf(const WorkerOptions& options) {
  if (options.executor == "synthetic") return ExecutorKind::kSynthetic;
  if (options.executor == "mlp") return ExecutorKind::kMlp;
  if (options.executor == "torch") {
#ifdef PIPEPLAN_HAVE_TORCH
    return ExecutorKind::kTorch;
#else
    return absl::FailedPreconditionError(
        "--executor torch: this pipeplan-worker was built without LibTorch");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--executor must be synthetic, mlp or torch, got \"", options.executor, "\""));
}

absl::Status CheckExecutorOptions(const WorkerOptions& options) {
  return ExecutorKindOf(options).status();
}

absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const WorkerOptions& options,
                                                       const StagePlan& plan,
                                                       const v1::ModelGraph& graph,
                                                       const ExecutorPlace& place,
                                                       TorchInputs* torch) {
  PIPEPLAN_ASSIGN_OR_RETURN(const ExecutorKind kind, ExecutorKindOf(options));
  switch (kind) {
    case ExecutorKind::kSynthetic:
      return MakeSynthetic(options, plan, place);
    case ExecutorKind::kMlp:
      return MakeMlp(options, plan, graph, place.rank);
    case ExecutorKind::kTorch:
      break;
  }
  if (torch == nullptr || torch->package == nullptr || torch->spec == nullptr) {
    return absl::FailedPreconditionError(
        "the torch executor needs the training session's package, spec and compiled stages");
  }
#ifdef PIPEPLAN_HAVE_TORCH
  return MakeTorch(options, plan, place, *torch);
#else
  return absl::FailedPreconditionError("this pipeplan-worker was built without LibTorch");
#endif
}

int VisibleCudaDevices() {
#ifdef PIPEPLAN_HAVE_TORCH
  return TorchCudaDeviceCount();
#else
  return CudaDeviceCount();
#endif
}

int64_t SamplesPerStep(const WorkerOptions& options, const StagePlan& plan, int64_t global_batch) {
  if (options.executor == "mlp") return int64_t{options.mlp_rows} * plan.num_microbatches;
  return global_batch;
}

}  // namespace pipeplan::worker
