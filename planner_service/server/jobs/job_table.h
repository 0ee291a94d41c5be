// The registry's one job table: what memory holds of each job (its record,
// current plan, workers, watchers and rendezvous keys), the context every
// piece of the registry works in, and the errors they share.
//
// Thread safety: none here. JobRegistry holds the table and the pieces
// around it under its one lock (ABSL_PT_GUARDED_BY in job_registry.h) and
// hands each piece the job it works on; nothing in this folder keeps a
// reference to a job past the call it got it in.
#ifndef PIPEPLAN_SERVER_JOBS_JOB_TABLE_H_
#define PIPEPLAN_SERVER_JOBS_JOB_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/jobs/job_ownership.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/store/store.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {
class Metrics;
}

namespace pipeplan::server::internal {

// Ids, names, rendezvous keys: at most this many bytes.
inline constexpr size_t kMaxIdBytes = 256;

// What every piece reads and nothing changes once the registry serves.
struct RegistryContext {
  Store* store = nullptr;
  const Clock* clock = nullptr;
  JobRegistry::Options options;
  Metrics* metrics = nullptr;         // may be null
  JobOwnership* ownership = nullptr;  // set by EnableReplication, before serving
  bool replicated() const { return ownership != nullptr; }
};

struct Worker {
  WorkerRecord record;
  absl::Time lease_expiry;
  // The lease end a peer's failure report set (WorkerLeases::
  // ReportPeerFailure); a renewal moves lease_expiry off it, which ends the
  // suspicion without touching this.
  absl::Time suspect_expiry = absl::InfinitePast();
  // The worker opened a WatchPlan stream on this planner, and since when it
  // has had none open (InfiniteFuture while one is): a dead process's
  // stream ends at once, a live one reopens it within its backoff.
  bool watched = false;
  absl::Time watch_gone_since = absl::InfiniteFuture();
  // The newest stored report's run and number: a resent report (same run,
  // number not above) is answered OK and not stored again.
  std::string report_run_id;
  int64_t report_seq = 0;
  // Replicated: when this replica last wrote the worker's heartbeat.
  absl::Time stored_heartbeat = absl::InfinitePast();
  // Replicated: a report of this worker is being stored (without the lock).
  bool report_in_flight = false;
  // The newest plan version whose transport failure this worker reported
  // (HeartbeatRequest.failed_version): it is alive and saw the failure, so
  // a peer naming it unreachable in that version is not believed.
  int64_t failure_seen_version = 0;
};

struct WatchEntry {
  std::string worker_id;
  std::weak_ptr<PlanWatcher> watcher;
};

struct Job {
  JobRecord record;
  std::shared_ptr<const v1::VersionedPlan> current;
  absl::flat_hash_map<std::string, Worker> workers;
  std::vector<WatchEntry> watches;
  absl::flat_hash_map<std::string, std::string> rendezvous;
  int64_t rendezvous_bytes = 0;  // keys and values of `rendezvous`
  // The plans a loss would publish after `contingency_version`
  // (JobRegistry::SetContingencies); memory only, like the rendezvous.
  int64_t contingency_version = 0;
  std::shared_ptr<const std::vector<v1::ContingencyPlan>> contingencies;
  // VersionedPlan.contingency_generation of `contingencies`.
  int64_t contingency_generation = 0;
  // Replicated: seen in the store by SyncFromStore (only such a job is
  // dropped when it is gone from the store).
  bool synced = false;
};

class JobTable {
 public:
  explicit JobTable(const RegistryContext* ctx) : ctx_(ctx) {}

  Job* Find(const std::string& job_id);
  const Job* Find(const std::string& job_id) const;
  bool contains(const std::string& job_id) const { return jobs_.contains(job_id); }
  Job& Insert(Job job);
  void Erase(const std::string& job_id) { jobs_.erase(job_id); }
  int size() const { return static_cast<int>(jobs_.size()); }
  absl::flat_hash_map<std::string, Job>& jobs() { return jobs_; }
  const absl::flat_hash_map<std::string, Job>& jobs() const { return jobs_; }

  // The job's active and lost workers and the number of jobs, to metrics.
  void UpdateGauges() const;

 private:
  const RegistryContext* const ctx_;
  absl::flat_hash_map<std::string, Job> jobs_;
};

// A stored job as memory holds it: its workers' last steps and report
// numbers come from its recent reports (read from the store), and each
// worker gets two leases of grace (see JobRegistry::Recover).
Job JobFromStored(const RegistryContext& ctx, StoredJob stored, absl::Time now);
// The job as the API shows it; `with_plan` copies the current plan.
v1::Job JobToProto(const Job& job, bool with_plan);
// Ends every watch of `job` with `status` and forgets them.
void CloseWatches(Job& job, const absl::Status& status);
// The job's state in the store: fenced by this planner's lease when it owns
// the job (a lost lease is dropped), plain otherwise.
absl::Status StoreJobState(const RegistryContext& ctx, const std::string& job_id,
                           v1::JobState state, const std::string& message);

absl::Status JobNotFound(const std::string& job_id);
// A cancelled job answers the worker calls as a deleted one would.
absl::Status JobCancelled(const std::string& job_id);
absl::Status JobDeleted(const std::string& job_id);
// INVALID_ARGUMENT for an empty `id` or one over kMaxIdBytes.
absl::Status CheckId(const std::string& field, const std::string& id);
// RESOURCE_EXHAUSTED that names the limit as its planner flag and its value.
absl::Status OverLimit(absl::string_view what, absl::string_view flag, int64_t limit);

}  // namespace pipeplan::server::internal

#endif  // PIPEPLAN_SERVER_JOBS_JOB_TABLE_H_
