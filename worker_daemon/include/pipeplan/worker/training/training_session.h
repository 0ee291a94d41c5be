// What `--executor torch` adds to the worker's loop: the job's training spec,
// the model package, stage compilation for each plan version, the torch
// executor of this rank, state that survives a plan switch (moved over the
// new version's transport, keyed by parameter name), in-memory peer
// snapshots (a lost rank's state comes from the peer that holds it) and
// checkpoints (resume from the newest complete one; write every
// `checkpoint_every` steps).
//
// A training error that a restart cannot fix (a package or data that does not
// fit, a non-finite loss) carries the JobFailed payload: the worker reports it
// with FinishWorker (the job turns FAILED with the message) and exits 5
// instead of crash-looping. The step loop's view of training (libpipeplan_worker).
#ifndef PIPEPLAN_WORKER_SRC_TRAINING_SESSION_H_
#define PIPEPLAN_WORKER_SRC_TRAINING_SESSION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "pipeplan/worker/env/job_failure.h"
#include "pipeplan/worker/env/planner_api.h"
#include "pipeplan/worker/env/worker_options.h"
#include "pipeplan/worker/executors/executor_factory.h"
#include "pipeplan/worker/runtime/executor.h"
#include "pipeplan/worker/runtime/stage_plan.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

// What one plan switch cost this worker, in seconds.
struct SwitchCost {
  // Compiling the new version's stages (mostly in the background, while the
  // old version trained); 0 when they were compiled before.
  double compile_seconds = 0;
  // The part of the compile the switch waited for (the whole compile at a
  // fresh start or for a device that had no rank before).
  double compile_wait_seconds = 0;
  // Moving parameters and optimizer state to their new owners, or loading
  // the newest checkpoint at a fresh start.
  double state_move_seconds = 0;
};

// The step loop's view of training; the torch implementation is
// StartTorchTraining (only in builds with LibTorch).
class TrainingSession {
 public:
  virtual ~TrainingSession() = default;

  // Starts compiling `version`'s stages on a background thread (the plan is
  // fetched there) and returns at once; nothing when it was started before.
  // Called by whichever thread first sees the version. Thread-safe.
  virtual void Prepare(int64_t version) = 0;
  // True once `version`'s background compile has finished, successfully or
  // not (a failure is reported by the switch). The ranks switch at a step
  // boundary only when every one of them says so. Thread-safe.
  virtual bool Prepared(int64_t version) = 0;
  // The cost of the last MakeExecutor + Resume on this worker.
  virtual SwitchCost LastSwitchCost() const = 0;

  virtual const v1::TrainingSpec& spec() const = 0;
  virtual v1::JobState job_state() const = 0;

  // The executor of `place` in `plan`, with its stages compiled (waiting for
  // the background compile Prepare started, else compiling them now;
  // cached). The place's transports carry the executor's reductions (its
  // replica's ranks) and gradient all-reduce (its rank's replicas) and must
  // outlive it.
  virtual absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const StagePlan& plan,
                                                                 const ExecutorPlace& place) = 0;

  // After a switch to `plan` (executor built, transports connected), every
  // device of the new version (every replica) calls this with the executor
  // and plan it ran before (null when none, or when a failed step made its
  // state unusable): the devices agree where the state comes from — the
  // previous version's holders that are still in the plan (over `world`, the
  // version's transport over all its devices; every replica's holder of a
  // stage gets its state), or the newest checkpoint (step 0 without one) for
  // every device, at a fresh start and whenever some state has no live
  // holder (every holder's device lost, a dropped step) — and on the step to
  // continue from, which is returned.
  virtual absl::StatusOr<int64_t> Resume(const StagePlan& plan, const ExecutorPlace& place,
                                         Transport& world, Executor& executor, Executor* previous,
                                         const StagePlan* previous_plan, int64_t step) = 0;

  // Writes a checkpoint after `steps` completed steps when the spec asks for
  // one at this step (all ranks of replica 0 call it; the other replicas
  // hold the same state and write none).
  virtual absl::Status MaybeCheckpoint(Executor& executor, int64_t plan_version, int64_t steps) = 0;
  // Writes a checkpoint after `steps` completed steps now, unless the job has
  // no checkpoint directory or MaybeCheckpoint wrote this step's already
  // (called like MaybeCheckpoint, at the boundary where a rank leaves, so
  // the ranks that stay resume from it and lose no step).
  virtual absl::Status CheckpointNow(Executor& executor, int64_t plan_version, int64_t steps) = 0;

  // After `steps` completed steps, on every device of the version (all
  // replicas): an in-memory peer snapshot round when the spec asks for one
  // at this step (docs/snapshots.md). Transport errors (a peer gone) as they
  // come: the step loop drops the version as after a failed step.
  virtual absl::Status AfterStep(Executor& executor, int64_t steps) {
    (void)executor;
    (void)steps;
    return absl::OkStatus();
  }
  // `transport` (a version's, passed to Resume) is about to go away: the
  // snapshot traffic on it settles and ends.
  virtual void ReleaseTransport(const Transport* transport) { (void)transport; }
};

// Reads the job (GetJob): FAILED_PRECONDITION (a job failure) when it has no
// training spec or its package differs from the package on this host.
absl::StatusOr<std::unique_ptr<TrainingSession>> StartTorchTraining(PlannerApi& planner,
                                                                    const WorkerOptions& options);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_TRAINING_SESSION_H_
