// The replanning policy: folds workers' step reports into a calibrated cost
// model and publishes plan version N+1 when it pays, or when a worker is lost.
//
// * Calibration: once every worker with a stage has reported `min_steps`
//   steps of the current version (after `warmup_steps`), and at most once per
//   `min_interval` per job, the policy estimates per-device time factors
//   (EstimateDeviceFactors: median of measured / modelled compute), divides
//   the devices' flops by them, re-runs MakePlan on the job's request with
//   that cluster (links fitted from paired SEND/RECV timings applied too),
//   and scores the current and the new plan under the same model as the
//   workers run them (SimulateAsRun). When the new plan's step time beats the
//   current one by more than `min_gain` (relative) and by more than
//   MinGainSeconds (absolute), it is published with a reason such as
//   "calibration: device gpu1 is 1.9x slower than modelled".
// * Membership: every replan places stages only on devices with a live
//   (ACTIVE) worker; devices without one are left out like lost ones (a job
//   no worker has joined plans onto its whole cluster).
// * Lost workers: when a worker whose device has a stage misses its lease,
//   the policy replans without that device (reason "worker w3 lost") and
//   publishes whatever the predicted gain (membership_decision.h). If no
//   plan fits, it logs `replan_failed` and keeps the current one (and does not
//   retry the same set of lost devices for that version).
// * Joined workers: when a live worker's device has no rank (a new worker,
//   or a lost one back), the policy replans over the live devices and
//   publishes unless the new plan leaves the joined devices out or is
//   measurably slower (membership_decision.h; reason "device cpu3 has a live
//   worker again"); once per set of such devices and version.
//
// The stored request of a new version is the job's request unchanged; the
// calibration used is recorded in Plan.calibration, and the plan's stage
// times are predictions under it. Factors are always relative to the
// request's cluster, so they do not compound across versions.
//
// Solves run on the SolvePool, never on the thread that calls Tick (nor on a
// gRPC thread). Thread safety: all methods may be called from any thread.
#ifndef PIPEPLAN_SERVER_REPLAN_REPLAN_POLICY_H_
#define PIPEPLAN_SERVER_REPLAN_REPLAN_POLICY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/solve/memory_budget.h"
#include "pipeplan/server/solve/solve_pool.h"

namespace pipeplan::server {

class Metrics;

struct ReplanPolicyOptions {
  bool enabled = true;
  // False: replan only when a worker is lost or joins (--replan=membership);
  // step reports still calibrate those replans' cost model, but a slow
  // device alone never publishes a version.
  bool calibrate = true;
  // Publish only when the new plan's predicted step time is this much
  // (relative) below the current plan's, both under the calibrated model.
  double min_gain = 0.05;
  // And (calibration replans) when it is this many seconds per step below,
  // and below by more than the cost of a switch spread over
  // `horizon_steps` steps. The switch cost is measured from the reports
  // around the job's last switch (the workers' pause); before any switch
  // `assumed_switch_seconds` stands in.
  double min_gain_seconds = 2e-3;
  int horizon_steps = 1'000;
  double assumed_switch_seconds = 1.0;
  // And (calibration replans) when the relative gain is above the measured
  // noise of the current version's steps ((p90 - p50) / p50) times this
  // (gain_threshold.h); 0 turns the test off.
  double noise_factor = 1.0;
  // Least time between two calibration evaluations of one job (and so
  // between two calibration replans).
  absl::Duration min_interval = absl::Seconds(30);
  // Reports per device of the current version, after warm-up, before the
  // factors are trusted.
  int min_steps = 5;
  int warmup_steps = 1;
  // Most recent reports read per evaluation.
  int report_window = 2'000;
  // Cap on the replan solve's time limit.
  double max_solve_seconds = 10;
  // Contingency plans (contingency_plans.h): once every rank of a version
  // has run `warmup_steps` + 2 steps, and again every
  // `contingency_refresh` while it runs, the plans a loss of each of its
  // devices (and hosts) would publish, at most `max_contingencies`, each
  // solved within `contingency_solve_seconds` (a refresh keeps each earlier
  // plan that still fits). A loss publishes its
  // contingency when, under the calibration then, its step is at most
  // `contingency_slack` (relative) slower than a plan solved then.
  bool contingencies = true;
  int max_contingencies = 16;
  double contingency_solve_seconds = 2;
  double contingency_slack = 0.05;
  absl::Duration contingency_refresh = absl::Seconds(10);
  GraphLimits limits;
};

enum class ReplanTrigger { kCalibration, kWorkerLost, kWorkerJoined };

// The absolute gain per step a calibration (or scale-up) replan must beat:
// max(min_gain_seconds, switch seconds / horizon), the switch seconds
// measured when positive (the pause the workers reported at the last switch,
// less their wait for compilation), else assumed; the horizon is
// `horizon_steps` when positive (the steps left of a job with max_steps,
// capped by the option), else the option's.
double MinGainSeconds(const ReplanPolicyOptions& options, double measured_switch_seconds,
                      int horizon_steps = 0);

struct ReplanOutcome {
  bool published = false;
  int64_t version = 0;              // the new version when published
  std::string reason;               // the published reason, or why nothing was published
  double current_step_seconds = 0;  // current plan under the calibrated model (inf: infeasible)
  double new_step_seconds = 0;
};

class ReplanPolicy {
 public:
  // `registry`, `pool`, `clock` (and `budget` when set) must outlive the
  // policy; `metrics` may be null. With a `budget`, every solve first
  // reserves its estimated memory in it, waiting up to 30 s for room.
  ReplanPolicy(JobRegistry* registry, SolvePool* pool, const Clock* clock,
               ReplanPolicyOptions options, Metrics* metrics = nullptr,
               MemoryBudget* budget = nullptr);

  // Looks at every job and submits an evaluation to the pool for each job
  // that is due (lost worker with a stage, or enough new reports and the
  // interval passed); at most one evaluation per job is in flight. Returns
  // how many were submitted. Cheap: reads no reports and copies no plans.
  int Tick();

  // One evaluation on the calling thread (what the pool runs; tests call it
  // directly). Errors: the registry's (NOT_FOUND for a deleted job); a
  // failed solve is an outcome with published=false, not an error.
  absl::StatusOr<ReplanOutcome> Evaluate(const std::string& job_id, ReplanTrigger trigger);

  const ReplanPolicyOptions& options() const { return options_; }

  // Computes and stores (JobRegistry::SetContingencies) the contingency
  // plans of the job's current version on the calling thread (what the
  // pool runs; tests call it directly). Returns how many were stored.
  // ABORTED when the version changed meanwhile.
  absl::StatusOr<int> ComputeContingencies(const std::string& job_id);

 private:
  struct JobState {
    int64_t version = 0;  // version the fields below refer to
    // Each worker's last step when the version was first seen.
    absl::flat_hash_map<std::string, int64_t> baseline_step;
    absl::Time last_evaluation = absl::InfinitePast();
    bool in_flight = false;
    // Lost devices already tried for this version.
    std::vector<std::string> lost_tried;
    // Devices of live workers without a rank already tried for this version.
    std::vector<std::string> joined_tried;
    // The version whose contingency plans were last computed, and when.
    int64_t contingency_version = 0;
    absl::Time contingency_at = absl::InfinitePast();
    bool contingency_in_flight = false;
  };

  struct Evaluation;

  // A new version of `job`: its workers' steps are the new baseline and no
  // lost or joined device has been tried for it.
  static void StartVersion(const v1::Job& job, JobState& st);
  // Why `job` is due for an evaluation now: a lost device with a rank not
  // tried yet, then a joined one, then calibration. nullopt: not due.
  std::optional<ReplanTrigger> TriggerFor(const v1::Job& job, JobState& st,
                                          const std::set<std::string>& lost_devices,
                                          const std::set<std::string>& joined,
                                          absl::Time now) const;
  // Whether the job's version is due for (new) contingency plans now
  // (recording the baseline of workers first seen on the way).
  bool ContingenciesDue(const v1::Job& job, JobState& st, absl::Time now) const;
  // Queues ComputeContingencies(id) on the pool; false when refused.
  bool SubmitContingencies(const std::string& id);
  // The evaluation's contingency for its lost devices when it still fits
  // (replacing `next` and the outcome's new step), with a log line either
  // way; false when there is none or it does not fit.
  bool UseContingency(const Evaluation& e, const PlanInputs& in, v1::Plan& next,
                      ReplanOutcome& outcome) const;
  // Queues Evaluate(id, trigger) on the pool; false when the pool refused.
  bool SubmitEvaluation(const std::string& id, ReplanTrigger trigger);
  // The evaluation's outcome without a new version, logged with why.
  static ReplanOutcome Unchanged(const Evaluation& e, ReplanOutcome outcome, std::string why);
  // Evaluate's second half: plans under the model, scores the current plan
  // under it and publishes when the new one pays.
  absl::StatusOr<ReplanOutcome> Replan(const Evaluation& e);

  // Drops the state of jobs no longer in `jobs` (and their gauges).
  void ForgetDeletedJobsLocked(const std::vector<v1::Job>& jobs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every live worker with a rank has reported enough steps of the version
  // since it was first seen (recorded in `st` on the way).
  static bool CalibrationDue(const v1::Job& job, JobState& st, const ReplanPolicyOptions& options);

  // Publishes `next` as the version after `current` with `reason`; ABORTED
  // (the registry's) when `current` has been replaced meanwhile.
  // Stores `prediction` (when given) with the version.
  absl::StatusOr<ReplanOutcome> Publish(const std::string& job_id, const v1::VersionedPlan& current,
                                        const v1::Plan& next, const std::string& reason,
                                        ReplanTrigger trigger, ReplanOutcome outcome,
                                        const v1::VersionPrediction* prediction = nullptr);
  // Why a calibration replan's gain is within the current version's
  // measured noise (gain_threshold.h); nullopt: it is not.
  std::optional<std::string> NoiseBlocks(const Evaluation& e, const ReplanOutcome& outcome) const;
  // What `next` is predicted to take under the evaluation's model, stored
  // with it (version_prediction.h); nullopt (logged) when it cannot be.
  std::optional<v1::VersionPrediction> Predict(const Evaluation& e, const v1::Plan& next,
                                               const PlanInputs& in) const;

  // Null (no budget) or a reservation of the solve's estimated memory.
  absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> ReserveMemory(
      const v1::PlanRequest& request);

  JobRegistry* const registry_;
  SolvePool* const pool_;
  MemoryBudget* const budget_;
  const Clock* const clock_;
  const ReplanPolicyOptions options_;
  Metrics* const metrics_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, JobState> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_REPLAN_POLICY_H_
