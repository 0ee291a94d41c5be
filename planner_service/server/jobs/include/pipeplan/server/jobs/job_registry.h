// Jobs, their versioned plans, and the workers attached to them. The
// registry is the in-memory view; every change is written to the Store
// first and applied to memory only once the store accepted it, so the store
// is the truth and a restart (Recover) rebuilds the same view. When a store
// write fails the call returns its error and memory is unchanged (a lease
// check that cannot record a lost worker leaves it active and tries again on
// the next check). Leases, heartbeat times of active workers and the
// rendezvous key-value space live in memory only.
//
// Leases: a worker's lease runs `lease` from its last RegisterWorker,
// Heartbeat or ReportStep; CheckLeases marks expired ones lost. A worker that
// called FinishWorker is DONE (LEFT when it left a job that goes on) and holds
// no lease until it heartbeats again. After
// Recover every worker's lease restarts (for two leases, the grace
// period), so workers that reconnect after a planner restart are never
// declared lost for the planner's downtime.
//
// Replicated planners (a shared store, EnableReplication): every replica
// serves every job. Writes go to the store first as above; SyncFromStore
// (every ~200 ms) brings in what the other replicas wrote: new and deleted
// jobs, plan versions (pushed to this replica's watchers), job states. A
// job or worker this replica has not seen yet is read from the store on
// first use. Heartbeats are written to the store (at most every lease/4 per
// worker, batched by SyncFromStore) so the job's owner sees workers that
// talk to other replicas; only
// the owner (JobOwnership) declares workers lost, and its plan versions and
// job state changes are fenced by its lease token.
//
// Inside (planner_service/server/jobs/): one job table (job_table.h) and the
// pieces around it, each one concern: plan_versions (versions and their
// watchers), worker_leases, step_reports, rendezvous_space and
// replication_sync. This class composes them and owns the one lock.
//
// Thread safety: all methods may be called from any thread. PlanWatcher
// callbacks run with the registry's lock held: they must only queue work and
// never call back into the registry.
#ifndef PIPEPLAN_SERVER_JOBS_JOB_REGISTRY_H_
#define PIPEPLAN_SERVER_JOBS_JOB_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/jobs/job_ownership.h"
#include "pipeplan/server/store/store.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

class Metrics;
namespace internal {
struct RegistryContext;
struct RegistryState;
struct Job;
struct Worker;
}  // namespace internal

// Receives a job's plan versions (WatchPlan's stream implements it).
class PlanWatcher {
 public:
  virtual ~PlanWatcher() = default;
  virtual void OnPlan(std::shared_ptr<const v1::PlanUpdate> update) = 0;
  // The stream should end with `status` (OK on shutdown, NOT_FOUND when the
  // job was deleted). No OnPlan follows.
  virtual void OnClose(const absl::Status& status) = 0;
};

// Who asks for a new plan version. With replicated planners the replan
// policy publishes only while this planner owns the job (FAILED_PRECONDITION
// otherwise); an operator's ReplanJob on another replica takes the job over
// (a forced claim: the next fencing token) and publishes fenced by it.
enum class PublishAs { kOperator, kOwner };

class JobRegistry {
 public:
  // Every limit is a planner flag of the same name (docs/operations.md,
  // "Limits"); past one a call gets RESOURCE_EXHAUSTED naming the flag and
  // its value.
  struct Options {
    absl::Duration lease = absl::Seconds(10);
    int max_jobs = 10'000;
    int max_workers_per_job = 4'096;
    // Rendezvous space. 256 KiB holds a Gloo full-mesh address list of
    // ~1,900 ranks (136 bytes per peer).
    int64_t rendezvous_max_value_bytes = 256 << 10;
    int64_t rendezvous_max_keys_per_job = 65'536;
    int64_t rendezvous_max_bytes_per_job = 64 << 20;
    // All jobs together: the bound on the planner's rendezvous memory.
    int64_t rendezvous_max_bytes = 512 << 20;
    // One ReportStep: serialized bytes and number of timings.
    int64_t max_report_bytes = 256 << 10;
    int64_t max_report_timings = 16'384;
    // How long a worker a peer reported unreachable keeps its lease (at
    // most `lease`) unless it reports the same failure itself.
    absl::Duration suspect_grace = absl::Seconds(1);
  };
  // `store` and `clock` must outlive the registry; `metrics` may be null.
  JobRegistry(Store* store, const Clock* clock, Options options, Metrics* metrics = nullptr);
  ~JobRegistry();

  // Loads every job from the store. Call once, before serving.
  absl::Status Recover();

  // Replicated planners over a shared store: `ownership` (which must
  // outlive the registry) says which jobs this planner owns. Call before
  // Recover. Without it this planner owns every job (SQLite).
  void EnableReplication(JobOwnership* ownership);
  bool replicated() const;
  // True when this planner may run the job's policy (always without
  // replication).
  bool Owns(const std::string& job_id) const;
  // Follows the other replicas' writes (see above) and ticks the ownership
  // (renewals, claims of expired jobs). No-op without replication.
  absl::Status SyncFromStore();
  // Adds the job's workers this replica does not hold yet (registered
  // through other replicas), so its owner can declare them lost and a
  // replan here sees every live worker. No-op without replication.
  void AdoptStoredWorkers(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

  // `training` is stored with the job (empty for planning-only jobs).
  absl::StatusOr<v1::Job> CreateJob(const std::string& name, const v1::PlanRequest& request,
                                    const v1::Plan& plan,
                                    const v1::TrainingSpec& training = v1::TrainingSpec());
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id) const;
  std::vector<v1::Job> ListJobs() const;
  absl::Status DeleteJob(const std::string& job_id);
  // Stops a running job and keeps it readable: state JOB_CANCELLED with
  // "cancelled: <reason>", watch streams end NOT_FOUND, and from then on the
  // worker calls (RegisterWorker, Heartbeat, ReportStep, Watch, rendezvous)
  // answer NOT_FOUND, so workers stop; PublishPlan is FAILED_PRECONDITION.
  // Its rendezvous keys are dropped and their memory freed.
  // OK again for a cancelled job; FAILED_PRECONDITION for one that already
  // succeeded or failed; NOT_FOUND for an unknown one.
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const std::string& reason);
  // version 0: the current one. The current version comes with its
  // contingency plans once SetContingencies stored them.
  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) const;
  // GetPlan's PLAN_VIEW_CONTINGENCIES: job_id, version, and for the current
  // version its contingency_generation and contingencies, the plans left
  // out when `known_generation` is that generation. The errors of GetPlan.
  absl::StatusOr<v1::VersionedPlan> GetContingencies(const std::string& job_id, int64_t version,
                                                     int64_t known_generation) const;
  // The plans the replan policy would publish after `version` if the devices
  // each names were lost (VersionedPlan.contingencies), replacing earlier
  // ones. Kept in memory only: a restarted planner computes them again.
  // ABORTED when `version` is no longer the job's current one; NOT_FOUND
  // for an unknown job.
  absl::Status SetContingencies(const std::string& job_id, int64_t version,
                                std::vector<v1::ContingencyPlan> plans) ABSL_LOCKS_EXCLUDED(mu_);

  // The version bump path: stores `plan` (produced by `request`) as the next
  // version and pushes it to every watcher. Replanning policies (step-report
  // recalibration, lost workers) call this. Returns the new version.
  // `expected_version` > 0 makes it conditional: ABORTED when the job's
  // current version is another one (a replan computed from a version that
  // has since been replaced). `prediction`, when given, is stored with the
  // version (VersionedPlan.prediction).
  absl::StatusOr<int64_t> PublishPlan(const std::string& job_id, const v1::PlanRequest& request,
                                      const v1::Plan& plan, const std::string& reason,
                                      int64_t expected_version = 0,
                                      PublishAs as = PublishAs::kOperator,
                                      const v1::VersionPrediction* prediction = nullptr);

  // Registering again with the same worker id and device updates the
  // registration (a reconnect, e.g. a restart in place). A worker id is bound
  // to its device: ALREADY_EXISTS for the id of an ACTIVE worker from another
  // device (a lost or done worker's id may move). INVALID_ARGUMENT for a
  // missing id or a device not in the job's cluster; NOT_FOUND for an unknown
  // job.
  absl::StatusOr<v1::Assignment> RegisterWorker(const std::string& job_id,
                                                const v1::WorkerInfo& worker);
  // NOT_FOUND for an unknown job; FAILED_PRECONDITION for a worker the job
  // does not know (it registers again).
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& job_id,
                                                  const std::string& worker_id);
  // The same, with the worker's report of a failed transport
  // (failed_version > 0): each ACTIVE worker on one of the
  // unreachable_devices that has not reported a failure of that version
  // itself keeps its lease only for suspect_grace more (worker_leases.h).
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  // NOT_FOUND for an unknown job; FAILED_PRECONDITION for a worker the job
  // does not know, or for a plan version the job never had; RESOURCE_EXHAUSTED
  // for a report over max_report_bytes or max_report_timings. A report with a
  // run_id and seq is stored once: one the worker resends (same run, seq not
  // above the last stored) is answered OK and dropped. The first report
  // moves a PENDING job to RUNNING.
  absl::StatusOr<v1::ReportStepResponse> ReportStep(const v1::ReportStepRequest& report);
  // Most recent first; at most `limit` reports and `max_bytes` serialized
  // bytes (Store::RecentStepReports).
  absl::StatusOr<std::vector<v1::ReportStepRequest>> RecentStepReports(const std::string& job_id,
                                                                       int limit,
                                                                       int64_t max_bytes) const;
  // The current plan's predicted step seconds (cheap: no plan copy).
  // NOT_FOUND for an unknown job.
  absl::StatusOr<double> PlannedStepSeconds(const std::string& job_id) const;
  // The worker is done (state DONE, no lease: never declared lost). With an
  // error the job becomes FAILED with that message; without, the job is
  // COMPLETED once every worker holding a rank of the current plan is done. NOT_FOUND for an
  // unknown job, FAILED_PRECONDITION for an unregistered worker.
  absl::StatusOr<v1::Job> FinishWorker(const v1::FinishWorkerRequest& request);

  // Rendezvous key-value space of a job (memory only). INVALID_ARGUMENT for
  // an empty or over-long key (256 bytes); RESOURCE_EXHAUSTED for a value
  // over rendezvous_max_value_bytes, or when the job would pass
  // rendezvous_max_keys_per_job or rendezvous_max_bytes_per_job, or all jobs
  // rendezvous_max_bytes (key and value bytes count); NOT_FOUND for an
  // unknown job. Get returns found=false for a key not set yet.
  //
  // Freed: every key of a job when it is deleted, and the keys of plan
  // versions older than the previous one (keys named "v<N>/...", as workers
  // name them) when a version is published.
  absl::Status RendezvousSet(const std::string& job_id, const std::string& key,
                             const std::string& value);
  absl::StatusOr<v1::RendezvousGetResponse> RendezvousGet(const std::string& job_id,
                                                          const std::string& key) const;

  // Marks workers whose lease expired as lost; returns how many.
  int CheckLeases();

  // Subscribes `watcher` to the job's plan versions; it receives the current
  // version at once when it is newer than `known_version`.
  absl::Status Watch(const std::string& job_id, const std::string& worker_id, int64_t known_version,
                     std::weak_ptr<PlanWatcher> watcher);
  // Ends every watch with `status` (shutdown).
  void CloseAllWatchers(const absl::Status& status);

  struct Counts {
    int jobs = 0;
    int active_workers = 0;
    int lost_workers = 0;
    int watchers = 0;
    // Key and value bytes held in the rendezvous space, all jobs together.
    int64_t rendezvous_bytes = 0;
  };
  Counts counts() const;
  absl::Duration lease() const;

 private:
  // A version already in the store becomes current: the rendezvous keys it
  // outdates go (RendezvousSpace), then ranks and watchers follow
  // (PlanVersions).
  void ApplyPlanLocked(internal::RegistryState& s, internal::Job& job,
                       std::shared_ptr<const v1::VersionedPlan> plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Memory and watchers follow `stored` when it is a newer version.
  void ApplyStoredLocked(internal::RegistryState& s, internal::Job& job, StoredJob stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SyncFromStore's part for one job head.
  void SyncJob(const JobHead& head) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets a job deleted here or elsewhere: its watches end NOT_FOUND, its
  // rendezvous bytes are freed (returned) and its metrics dropped.
  int64_t RemoveJobLocked(internal::RegistryState& s, const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CancelJob under mu_; *freed: the rendezvous bytes it dropped.
  absl::StatusOr<v1::Job> MarkCancelled(const std::string& job_id, const std::string& reason,
                                        int64_t* freed) ABSL_LOCKS_EXCLUDED(mu_);
  // ReportStep's store write on a shared store, with mu_ released around
  // it; `w` is valid only until then.
  absl::StatusOr<v1::ReportStepResponse> StoreReportUnlocked(const v1::ReportStepRequest& report,
                                                             internal::Worker& w,
                                                             v1::ReportStepResponse r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // What every piece reads; ownership is set before serving, then constant.
  const std::unique_ptr<internal::RegistryContext> ctx_;
  mutable absl::Mutex mu_;
  // The job table and the pieces around it (jobs/registry_state.h): every
  // access holds mu_.
  const std::unique_ptr<internal::RegistryState> state_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_JOBS_JOB_REGISTRY_H_
