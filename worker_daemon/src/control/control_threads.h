// The worker's two background threads, from registration until Run returns:
//
// * watch: keeps a WatchPlan stream open and reconnects with backoff (100 ms
//   to 2 s) when it breaks, e.g. while the planner restarts; records the
//   newest version and notices when the job is deleted.
// * heartbeat: renews the lease every lease/3 and registers again when the
//   planner no longer knows the worker (FAILED_PRECONDITION).
//
// Both decide by status code (proto/pipeplan/v1/planner_service.proto):
// NOT_FOUND means the job is gone.
//
// Both only write ControlState; the step loop reads it. Internal to
// libpipeplan_worker.
#ifndef PIPEPLAN_WORKER_SRC_CONTROL_THREADS_H_
#define PIPEPLAN_WORKER_SRC_CONTROL_THREADS_H_

#include <thread>

#include "control_state.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "pipeplan/worker/env/planner_api.h"
#include "pipeplan/worker/env/worker_options.h"

namespace pipeplan::worker {

class ControlThreads {
 public:
  // Starts both threads. `planner`, `options` and `state` must outlive this.
  ControlThreads(PlannerApi& planner, const WorkerOptions& options, v1::WorkerInfo info,
                 ControlState& state);
  // Stop().
  ~ControlThreads();
  ControlThreads(const ControlThreads&) = delete;
  ControlThreads& operator=(const ControlThreads&) = delete;

  // Shuts `state` down (ending the watch stream) and joins both threads.
  // Idempotent.
  void Stop();

 private:
  void WatchLoop();
  void HeartbeatLoop();
  // One heartbeat; it carries the step loop's peer failure when one waits.
  absl::StatusOr<v1::HeartbeatResponse> HeartbeatOnce();

  PlannerApi& planner_;
  const WorkerOptions& options_;
  const v1::WorkerInfo info_;
  ControlState& state_;
  std::thread watcher_;
  std::thread heart_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_CONTROL_THREADS_H_
