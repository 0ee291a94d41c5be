// Persistence of jobs, plan versions, worker registrations and recent step
// reports, behind one interface (Ray's StoreClient idea). The embedded
// default is SQLite in a data directory; tests may use the in-memory store.
//
// Contract: every mutating call is atomic (all or nothing) and durable
// against a process crash once it returns OK; a failed one changes nothing.
// Errors: NOT_FOUND for a missing job or version, ALREADY_EXISTS for a
// duplicate id or version, RESOURCE_EXHAUSTED when the disk is full,
// UNAVAILABLE when the backing file cannot be written right now (an I/O
// error, a read-only file system, a busy database): both may succeed when
// retried; DATA_LOSS when the file is corrupt, INTERNAL otherwise.
// Thread safety: implementations are safe to call from any thread.
#ifndef PIPEPLAN_SERVER_STORE_STORE_H_
#define PIPEPLAN_SERVER_STORE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

struct JobRecord {
  std::string id;
  std::string name;
  int64_t create_time_unix_ms = 0;
  int64_t current_version = 0;
  // Empty for planning-only jobs.
  v1::TrainingSpec training;
  v1::JobState state = v1::JOB_RUNNING;
  std::string failure_message;
};

struct WorkerRecord {
  std::string job_id;
  v1::WorkerInfo info;
  int rank = -1;
  v1::WorkerState state = v1::WORKER_ACTIVE;
  int64_t last_heartbeat_unix_ms = 0;
  int64_t last_step = -1;
};

// A job's ownership lease in a store several planners share: one planner
// (`owner`, reachable at `address`) runs the job's replan policy and writes
// its plan versions until `expiry`. `token` grows by one at every change of
// owner: a write fenced with an older token fails, so a planner that lost
// the job (paused, partitioned) can never publish.
struct JobLease {
  std::string job_id;
  std::string owner;
  std::string address;
  int64_t token = 0;
};

struct WorkerHeartbeat {
  std::string job_id;
  std::string worker_id;
  int64_t unix_ms = 0;
};

// A job as the shared store has it now: what a replica compares with its
// memory to follow the other replicas' writes (JobRegistry::SyncFromStore).
struct JobHead {
  std::string id;
  int64_t current_version = 0;
  v1::JobState state = v1::JOB_RUNNING;
  std::string failure_message;
  // Empty when nobody holds the lease or it expired.
  std::string owner;
};

// What a restart reloads: every job with its current plan version (older
// versions stay in the store and are read on demand) and its workers.
struct StoredJob {
  JobRecord job;
  v1::VersionedPlan current;
  std::vector<WorkerRecord> workers;
};

class Store {
 public:
  virtual ~Store() = default;

  // Creates `job` with its first plan version (`first.version()` must be 1).
  virtual absl::Status CreateJob(const JobRecord& job, const v1::VersionedPlan& first) = 0;
  // Adds `plan` as a new version of its job and makes it current.
  // REQUIRES: plan.version() == current version + 1 (else FAILED_PRECONDITION).
  virtual absl::Status AppendPlan(const v1::VersionedPlan& plan) = 0;
  // Deletes the job, its plans, workers and reports.
  virtual absl::Status DeleteJob(const std::string& job_id) = 0;
  // NOT_FOUND for an unknown job.
  virtual absl::Status SetJobState(const std::string& job_id, v1::JobState state,
                                   const std::string& failure_message) = 0;
  virtual absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) = 0;
  // Inserts or replaces a worker registration.
  virtual absl::Status PutWorker(const WorkerRecord& worker) = 0;
  // Appends a report; only the most recent `report_window` per job are kept
  // (the SQLite and PostgreSQL stores may hold a few more until their next
  // trim of that job). The PostgreSQL store, shared by replicas, also stores
  // a report with a run id at most once per (worker, run id, seq): a second
  // append of it is OK and changes nothing.
  virtual absl::Status AppendStepReport(const v1::ReportStepRequest& report) = 0;
  // Most recent first: at most `limit` reports and, beyond the first, at most
  // `max_bytes` serialized bytes together, so a reader's memory is bounded
  // whatever the reports' sizes.
  virtual absl::StatusOr<std::vector<v1::ReportStepRequest>> RecentStepReports(
      const std::string& job_id, int limit, int64_t max_bytes) = 0;
  virtual absl::StatusOr<std::vector<StoredJob>> Load() = 0;

  // --- Shared stores only (several planners on one database). ---
  // The methods below are for stores that several planner processes share
  // (PostgreSQL); the embedded stores answer UNIMPLEMENTED and their one
  // planner owns every job.
  virtual bool shared() const { return false; }
  // Every job's head, ordered by id.
  virtual absl::StatusOr<std::vector<JobHead>> JobHeads();
  // One job as Load has it; NOT_FOUND when it is gone.
  virtual absl::StatusOr<StoredJob> LoadJob(const std::string& job_id);
  // NOT_FOUND for an unknown job or worker.
  virtual absl::StatusOr<WorkerRecord> GetWorker(const std::string& job_id,
                                                 const std::string& worker_id);
  // Records workers' heartbeats (job id, worker id, unix ms), a batch in
  // one statement; a time older than the stored one and an unknown worker
  // are ignored. The owner reads them before it declares a worker lost.
  virtual absl::Status TouchWorkers(const std::vector<WorkerHeartbeat>& heartbeats);
  // Takes the job's lease for `owner` for `ttl` (by the database's clock)
  // when nobody holds it, it expired, `owner` holds it already (a renewal,
  // same token) or `force` (an operator's request taking the job over);
  // a new owner gets the next token. FAILED_PRECONDITION while another
  // owner's lease runs; NOT_FOUND for an unknown job.
  virtual absl::StatusOr<JobLease> ClaimJob(const std::string& job_id, const std::string& owner,
                                            const std::string& address, absl::Duration ttl,
                                            bool force);
  // Extends every lease `owner` still holds by `ttl` and returns them (a
  // lease taken by another planner is not among them).
  virtual absl::StatusOr<std::vector<JobLease>> RenewJobLeases(const std::string& owner,
                                                               absl::Duration ttl);
  // AppendPlan and SetJobState in one transaction with a check that `fence`
  // (owner and token) still holds the job's lease: FAILED_PRECONDITION when
  // another planner took it (nothing is written).
  virtual absl::Status AppendPlanFenced(const v1::VersionedPlan& plan, const JobLease& fence);
  virtual absl::Status SetJobStateFenced(const std::string& job_id, v1::JobState state,
                                         const std::string& failure_message, const JobLease& fence);
  // The rendezvous space, shared so that workers of one job may talk to
  // different replicas. `version`: the plan version the key belongs to
  // ("v<N>/..."), -1 for none. NOT_FOUND for an unknown job.
  virtual absl::Status RendezvousPut(const std::string& job_id, const std::string& key,
                                     const std::string& value, int64_t version);
  // nullopt for a key not set.
  virtual absl::StatusOr<std::optional<std::string>> RendezvousFetch(const std::string& job_id,
                                                                     const std::string& key);
  // Drops the job's keys of versions 0 .. oldest_kept - 1.
  virtual absl::Status RendezvousTrim(const std::string& job_id, int64_t oldest_kept);
};

struct SqliteStoreOptions {
  // Step reports kept per job: the newest `report_window`, none older than
  // `report_max_age` (zero: no age limit). Checked every few reports of the
  // job (every report_window / 16, at most 256).
  int report_window = 10'000;
  absl::Duration report_max_age = absl::ZeroDuration();
  // Times the reports; null: RealClock().
  const Clock* clock = nullptr;
};

// Opens (creating if needed) `dir`/pipeplan.db: WAL journal, one transaction
// per mutation, a schema version checked on open. FAILED_PRECONDITION for a
// database written by a newer schema, a zero-byte file, a file that is not
// an SQLite database or an SQLite database of another program. New files use
// incremental auto-vacuum: a deleted job's pages go back to the file system.
absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& dir,
                                                       SqliteStoreOptions options = {});

struct PostgresStoreOptions {
  // Step reports kept per job, as in SqliteStoreOptions.
  int report_window = 10'000;
  absl::Duration report_max_age = absl::ZeroDuration();
  // Times the reports; null: RealClock().
  const Clock* clock = nullptr;
  int connections = 4;  // pooled; each mutation holds one
};

// Connects to PostgreSQL (`conninfo`: a postgres:// or postgresql:// URI or
// libpq key=value pairs) and applies the schema migrations this planner
// knows, idempotently and once even when replicas start together.
// UNAVAILABLE when the server cannot be reached, FAILED_PRECONDITION for a
// malformed conninfo or a database migrated by a newer planner. Besides the
// Store contract: RESOURCE_EXHAUSTED when the server is out of disk or
// connections, UNAVAILABLE when it is down, read-only or restarting.
absl::StatusOr<std::unique_ptr<Store>> OpenPostgresStore(const std::string& conninfo,
                                                         PostgresStoreOptions options = {});

// True when `spec` names a PostgreSQL database (postgres://, postgresql://).
bool IsPostgresUrl(const std::string& spec);

// `url` without its password (for logs): postgres://user:secret@h/db ->
// postgres://user:***@h/db.
std::string RedactedStoreUrl(const std::string& url);

// A store that forgets everything when destroyed; for tests.
std::unique_ptr<Store> NewMemoryStore(int report_window = 10'000);

// Creates `dir` and its parents (mode 0700 for new directories).
absl::Status MakeDirs(const std::string& dir);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_STORE_STORE_H_
