// The one place that knows the executor kinds: turns `--executor NAME` into
// an ExecutorKind and makes every Executor — synthetic, reference MLP and
// torch — for a rank of a plan version. A new executor kind is a new branch
// here (and its options in WorkerOptions); the step loop only sees the
// Executor interface, and no other file compares executor names.
#ifndef PIPEPLAN_WORKER_EXECUTOR_FACTORY_H_
#define PIPEPLAN_WORKER_EXECUTOR_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeplan/client/model_package.h"
#include "pipeplan/v1/graph.pb.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "pipeplan/worker/env/worker_options.h"
#include "pipeplan/worker/runtime/executor.h"
#include "pipeplan/worker/runtime/stage_plan.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

enum class ExecutorKind {
  kSynthetic,  // busy-waits the plan's predicted times
  kMlp,        // the reference MLP of the plan's graph
  kTorch,      // the job's model through LibTorch (a training session)
};

// `options.executor` as a kind: INVALID_ARGUMENT naming the flag when it is
// not a known kind, FAILED_PRECONDITION for torch in a build without
// LibTorch. Worker::Create calls it, so a bad flag fails before registering.
absl::StatusOr<ExecutorKind> ExecutorKindOf(const WorkerOptions& options);
absl::Status CheckExecutorOptions(const WorkerOptions& options);

// Where an executor runs in a plan: its rank (which holds at least one
// stage) in its replica, and the groups it talks over (null: one rank / one
// replica). The transports must outlive the executor.
struct ExecutorPlace {
  int rank = 0;
  int replica = 0;
  // This replica's ranks: the executor's sums over ranks.
  Transport* pipeline = nullptr;
  // This rank in every replica (group rank = replica): the gradient
  // all-reduce.
  Transport* replica_group = nullptr;
  // The torch device the executor runs on (the torch executor only).
  std::string torch_device = "cpu";
};

// CUDA devices this process's executors can use: LibTorch's count in a
// build with the torch executor, else the CUDA runtime's (NCCL builds),
// else 0.
int VisibleCudaDevices();

// What only the torch executor reads, from the training session: the job's
// model package and training spec, and the plan's compiled stages. The
// pointers must stay valid during MakeExecutor.
struct TorchInputs {
  const ModelPackage* package = nullptr;
  const v1::TrainingSpec* spec = nullptr;
  CompiledStages stages;
};

// The executor of `place` in `plan`. `graph` is the plan's request graph
// (empty when the request had none); `torch` is required for the torch kind
// and ignored otherwise. FAILED_PRECONDITION when the executor needs the
// graph and the plan has none, the mlp executor meets several replicas (it
// has no gradient all-reduce), or torch inputs are missing; the torch
// executor's own errors pass through (INVALID_ARGUMENT, NOT_FOUND).
absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const WorkerOptions& options,
                                                       const StagePlan& plan,
                                                       const v1::ModelGraph& graph,
                                                       const ExecutorPlace& place,
                                                       TorchInputs* torch = nullptr);

// Rows of the global batch one step of `plan` trains, for samples/s, when
// no training spec says it: the mlp's rows per microbatch, else the
// request's `global_batch` (0: unknown).
int64_t SamplesPerStep(const WorkerOptions& options, const StagePlan& plan, int64_t global_batch);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_EXECUTOR_FACTORY_H_
