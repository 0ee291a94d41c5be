// The one place that turns `--executor NAME` into an Executor for a rank of a
// plan version. A new executor kind is a new branch here (and its options in
// WorkerOptions); the step loop only sees the Executor interface.
#ifndef PIPEPLAN_WORKER_EXECUTOR_FACTORY_H_
#define PIPEPLAN_WORKER_EXECUTOR_FACTORY_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeplan/v1/graph.pb.h"
#include "pipeplan/worker/executor.h"
#include "pipeplan/worker/stage_plan.h"
#include "pipeplan/worker/transport.h"
#include "pipeplan/worker/worker_options.h"

namespace pipeplan::worker {

// INVALID_ARGUMENT naming the flag when `options.executor` is not a known
// kind. Worker::Create calls it, so a bad flag fails before registering.
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
};

// The executor of `place` in `plan`. `graph` is the plan's request graph
// (empty when the request had none). FAILED_PRECONDITION when the executor
// needs the graph and the plan has none, or is the mlp executor and the
// plan has several replicas (it has no gradient all-reduce).
absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const WorkerOptions& options,
                                                       const StagePlan& plan,
                                                       const v1::ModelGraph& graph,
                                                       const ExecutorPlace& place);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_EXECUTOR_FACTORY_H_
