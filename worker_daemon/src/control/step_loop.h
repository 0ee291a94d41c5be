// The worker's main loop, after registration:
//
//   at each step boundary:  AgreeAtBoundary (plan version and stop vote,
//                           over the running transport)
//   on a new version:       SwitchTo (BuildActivePlan: fetch, rendezvous,
//                           runtime, executor)
//   otherwise:              RunOneStep (run the rank's actions, report)
//
// Every rank runs the same sequence of boundaries, so all of them switch
// plans, and leave, after the same step.
//
// A stop (SIGTERM) is a leave, voted at the next boundary: every rank writes
// a checkpoint of that step, the stopped ranks end the loop (left()) and the
// others drop the running version and wait for the planner's next one,
// which it publishes at once when the leaving worker says so (FinishWorker
// with leaving); they resume from that checkpoint, so no step is lost. A
// leaving rank cannot hand its state over directly: state moves over the
// new version's transport, which only the new version's ranks join. When
// every rank stops (the whole host), all of them leave the same way.
//
// A peer that dies (kill -9, a lost host) fails the vote, the step, the
// checkpoint barrier or the next rendezvous with a transport error. The
// worker then drops the step and the running version (its in-memory state
// may be half updated, so it never serves as a state source again), closes
// its transport (so the ranks still blocked on it fail too) and waits for
// the planner's next version, which leaves out the lost device; after two
// leases without one it tries the same version again (a peer restarted in
// place). A peer that hangs closes no socket: once a newer version is known
// and a step or vote has made no progress for the grace period
// (StallGrace; ShrinkGrace when the newer version leaves out a device of
// the running one), the stall watch aborts the running transport and the
// same recovery follows (stall_watch.h). Only a job failure, a deleted job or a
// stop ends the loop.
//
// The loop reads the planner through PlannerApi, time through Clock and
// connects transports through a ConnectTransportFn, so tests run it with a
// fake planner, a fake clock and the in-memory transport.
#ifndef PIPEPLAN_WORKER_SRC_STEP_LOOP_H_
#define PIPEPLAN_WORKER_SRC_STEP_LOOP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "active_plan.h"
#include "control_state.h"
#include "pipeplan/worker/env/clock.h"
#include "pipeplan/worker/env/planner_api.h"
#include "pipeplan/worker/env/worker_options.h"
#include "pipeplan/worker/metrics/worker_metrics.h"
#include "pipeplan/worker/report/report_sender.h"
#include "pipeplan/worker/training/training_session.h"
#include "pipeplan/worker/transport/rendezvous.h"
#include "planner_key_value.h"
#include "stall_watch.h"

namespace pipeplan::worker {

class StepLoop {
 public:
  // Everything passed in must outlive the loop; `metrics` may be null.
  // `training` (null unless --executor torch) builds the executors, moves
  // state at switches, resumes from checkpoints and writes them; `reports`
  // delivers step reports. `connect` (null: a rendezvous round through the
  // planner's key-value space) connects each version's transport.
  StepLoop(PlannerApi& planner, const WorkerOptions& options, ControlState& state,
           const std::atomic<bool>& stop, WorkerMetrics* metrics, TrainingSession* training,
           ReportSender& reports, Clock& clock = RealClock(), ConnectTransportFn connect = nullptr);

  // Runs until `options.steps` steps are done, the job completed without
  // this worker, this worker leaves (a stop, at a boundary or while not
  // connected; OK), the job is deleted (NOT_FOUND) or an error (a failed
  // vote, switch or step).
  absl::Status Run();
  // Steps completed so far.
  int64_t steps() const { return step_; }
  // The plan version of the last step this worker ran (0: none).
  int64_t plan_version() const { return last_version_; }
  // True when Run returned because training reached its max_steps, the
  // worker its --steps, or the job completed while this worker had no work
  // in it: the worker is done with the job.
  bool trained_to_the_end() const { return trained_to_the_end_; }
  // True when Run returned because this worker was stopped before the job's
  // end: it leaves a job that goes on; with whole_job_left() every rank of
  // the running version left with it.
  bool left() const { return left_; }
  bool whole_job_left() const { return whole_job_left_; }

 private:
  struct Boundary {
    int64_t version = 0;    // the highest version any rank knows
    bool leave = false;     // some rank was asked to stop: it leaves here
    bool mine = false;      // this rank is one of them
    bool everyone = false;  // every rank is one of them
  };
  absl::StatusOr<Boundary> AgreeAtBoundary(int64_t known_version);
  // Drops the running version and builds `version`; a device without a stage
  // in it waits for the next version.
  absl::Status SwitchTo(int64_t version);
  // Training state into `a`'s executor: from `previous` (the version
  // switched from, null when none holds state) or a checkpoint (Resume).
  absl::Status ResumeInto(ActivePlan& a, const ActivePlan* previous);
  void WaitForVersionAfter(int64_t version);
  // Waits up to `deadline` for a version newer than `version` (or a stop,
  // the job's end).
  void WaitForNewerVersion(int64_t version, absl::Time deadline);
  // The boundary where ranks leave: saves the step, then ends this rank's
  // part (true) or drops the running version to wait for the next (false).
  bool Leave(const Boundary& boundary);
  // The step's figures into the worker's metrics (when it exports any).
  void ObserveStep(const StepResult& r, double peak_memory, std::optional<double> loss,
                   std::optional<double> exposed);
  absl::Status RunOneStep();
  bool ReachedMaxSteps() const;
  // NOT_FOUND for a job whose watch ended NOT_FOUND: cancelled (with its
  // reason) or deleted.
  absl::Status JobGone();
  // After `error` (a vote, step, switch or checkpoint that failed at
  // `version`): returns `error` when no new version can fix it (a job
  // failure, a bad plan), else drops the running version, waits as the
  // header says and returns OK for the loop to switch.
  absl::Status DropAfterFailure(const absl::Status& error, int64_t version);
  // Hands the heartbeat thread the failure of `version` with the devices
  // the running transport found unreachable (ControlState).
  void ReportFailure(int64_t version);
  // How long a step or vote of the running version may go on once a newer
  // version is known: a lease (the planner's own patience with a silent
  // worker), or four of the last step's durations when steps are longer.
  absl::Duration StallGrace() const;
  // When the newer version leaves out a device of `plan` (its worker was
  // lost), the wait will not end: a second, or four steps.
  StallWatch::Shrink ShrinkGrace(const StagePlan& plan) const;
  // The stall watch over every wait on `a`'s transport: the step and the
  // boundary vote, and as much the work around them that waits on peers
  // (the snapshot round, a checkpoint's barriers, a resume's state move):
  // a peer lost there ends the wait when the planner replans, not after
  // the comm timeout.
  StallWatch::Scope Watch(const ActivePlan& a);
  // After a step: the training session's snapshot round and checkpoint.
  absl::Status FinishStep();
  // At a switch into a version where this worker trains on the host over
  // Gloo in a replica of two ranks or more: the all-reduce probe, under the
  // stall watch. A failed probe (a peer lost) is logged and left out; the
  // first step meets the failure.
  void ProbeAllReduceOnce();

  PlannerApi& planner_;
  const WorkerOptions& options_;
  Clock& clock_;
  ControlState& state_;
  const std::atomic<bool>& stop_;
  WorkerMetrics* metrics_;
  PlannerKeyValue kv_;
  const ConnectTransportFn connect_;
  TrainingSession* training_;
  ReportSender& reports_;
  std::unique_ptr<ActivePlan> active_;
  // A version whose state is whole though the switch out of it failed
  // (disconnected): the next switch moves state from it. Null otherwise.
  std::unique_ptr<ActivePlan> held_;
  // The last switch's pause and compile wait, sent with the first step
  // report of the version it switched into (then cleared).
  struct SwitchPause {
    double seconds = 0;
    double compile_wait_seconds = 0;
  };
  std::optional<SwitchPause> unreported_switch_;
  int64_t step_ = 0;
  int64_t last_version_ = 0;
  absl::Duration last_step_time_ = absl::ZeroDuration();
  // Declared last: its thread stops before the members it reads go away.
  StallWatch stall_watch_;
  bool trained_to_the_end_ = false;
  bool left_ = false;
  bool whole_job_left_ = false;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_STEP_LOOP_H_
