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
#include "pipeplan/worker/worker_options.h"

namespace pipeplan::worker {

// INVALID_ARGUMENT naming the flag when `options.executor` is not a known
// kind. Worker::Create calls it, so a bad flag fails before registering.
absl::Status CheckExecutorOptions(const WorkerOptions& options);

// The executor of `rank` (which holds at least one stage of `plan`).
// `graph` is the plan's request graph (empty when the request had none).
// FAILED_PRECONDITION when the executor needs the graph and the plan has
// none.
absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const WorkerOptions& options,
                                                       const StagePlan& plan,
                                                       const v1::ModelGraph& graph, int rank);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_EXECUTOR_FACTORY_H_
