// The worker daemon's control loop (`pipeplan-worker`).
//
//   register -> watch the plan -> [agree on a version -> rendezvous ->
//   build the rank's runtime] -> run steps, report each -> ...
//
// * RegisterWorker (retried while the planner is UNAVAILABLE) gives the rank.
// * A watch thread keeps a WatchPlan stream open and reconnects with backoff
//   when it breaks (planner restart); it records the newest version seen.
// * A heartbeat thread renews the lease every lease/3.
// * At every step boundary the ranks take the maximum of the versions they
//   know (a tiny all-reduce over the current transport), so all of them
//   switch to plan N+1 at the same boundary. A ReportStep answered with
//   FAILED_PRECONDITION (stale version) or a newer current_plan_version feeds
//   the same agreement. A switch fetches the version (GetPlan: plan + graph),
//   runs a new rendezvous round keyed by the version and rebuilds runtime and
//   executor.
// * A worker whose device has no stage in a version waits for the next one.
//
// Pieces (worker_daemon/src/control): ControlThreads (watch, heartbeat)
// write ControlState; StepLoop (AgreeAtBoundary, SwitchTo, RunOneStep) reads
// it, builds an ActivePlan per version (the executor through MakeExecutor)
// and reports each step (report/step_report.h). All of them reach the
// planner through PlannerApi and read time through Clock (env/).
#ifndef PIPEPLAN_WORKER_WORKER_H_
#define PIPEPLAN_WORKER_WORKER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/worker/env/job_failure.h"
#include "pipeplan/worker/env/planner_api.h"
#include "pipeplan/worker/env/worker_options.h"

namespace pipeplan::worker {

class WorkerMetrics;
class TrainingSession;

class Worker {
 public:
  static absl::StatusOr<std::unique_ptr<Worker>> Create(WorkerOptions options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs until `steps` steps are done (OK), the training spec's max_steps
  // are (OK, reported with FinishWorker), the job completed without this
  // worker (OK), Stop() was called (OK, the worker left the job: reported
  // with FinishWorker), the job was deleted (NOT_FOUND), the job failed
  // (IsJobFailure) or an unrecoverable error.
  absl::Status Run();
  // Asks Run to leave the job after the current step: at that step boundary
  // every rank saves a checkpoint, this worker tells the planner it leaves
  // and returns, and the other ranks go on with the plan the planner makes
  // without it (step_loop.h). Async-signal-safe.
  void Stop() { stop_.store(true); }

  // "HOST:PORT" of the metrics endpoint, empty when off.
  std::string metrics_address() const;

 private:
  explicit Worker(WorkerOptions options);
  // RegisterWorker, retried with backoff while the planner is unavailable,
  // up to connect_timeout or a Stop().
  absl::StatusOr<v1::Assignment> Register(const v1::WorkerInfo& info);
  // --executor torch: the job's training session (a failed job: a job
  // failure).
  absl::StatusOr<std::unique_ptr<TrainingSession>> StartTraining();
  // How a worker ends its part in the job, for FinishWorker.
  struct Ending {
    int64_t steps = 0;
    int64_t plan_version = 0;  // the version it last trained on (0: none)
    bool leaving = false;      // stopped before the job's end
    bool whole_job = false;    // every rank of its version left with it
  };
  // FinishWorker with `result` (its message when not OK); returns `result`.
  absl::Status Finish(const Ending& ending, absl::Status result);

  WorkerOptions options_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<client::PlannerClient> client_;
  // The control plane's view of client_ (declared after it: goes first).
  std::unique_ptr<PlannerApi> planner_;
  std::unique_ptr<WorkerMetrics> metrics_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_WORKER_H_
