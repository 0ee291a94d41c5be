// Which jobs this planner owns, when several planner replicas share one
// store (PostgreSQL). Each job has one owner at a time through a lease row
// with a fencing token (Store::ClaimJob): the owner runs the job's replan
// policy, declares its workers lost and writes its plan versions and state
// changes fenced by its token, so a planner that lost the job (paused past
// its lease, partitioned) can never publish. Tick renews the held leases
// (every lease/3) and claims jobs whose owner's lease expired, so when a
// planner dies its jobs move to a live one within about one lease.
//
// Thread safety: all methods may be called from any thread.
#ifndef PIPEPLAN_SERVER_JOBS_JOB_OWNERSHIP_H_
#define PIPEPLAN_SERVER_JOBS_JOB_OWNERSHIP_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/server/store/store.h"

namespace pipeplan::server {

class JobOwnership {
 public:
  struct Options {
    // Unique per planner process (NewReplicaId()).
    std::string replica_id;
    // Where other replicas and operators reach this planner (host:port).
    std::string address;
    absl::Duration lease = absl::Seconds(10);
  };
  // `store` must outlive this and be shared (Store::shared()).
  JobOwnership(Store* store, Options options);

  // The lease this planner holds on `job_id`, if it holds one.
  std::optional<JobLease> Lease(const std::string& job_id) const;
  // Claims the job (force: even from a live owner, an operator's request).
  // The store's errors; FAILED_PRECONDITION while another owner's lease runs.
  absl::StatusOr<JobLease> Claim(const std::string& job_id, bool force);
  // Forgets the job (a fenced write failed: another planner took it).
  void Drop(const std::string& job_id);
  // Renews the held leases when lease/3 passed since the last renewal, then
  // claims every job of `heads` that has no live owner and may still change
  // (pending or running). Returns the jobs claimed now.
  std::vector<std::string> Tick(const std::vector<JobHead>& heads);

  const Options& options() const { return options_; }
  int owned() const;

 private:
  Store* const store_;
  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, JobLease> leases_ ABSL_GUARDED_BY(mu_);
  absl::Time last_renewal_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// A fresh random id for this planner process ("planner-<16 hex>").
std::string NewReplicaId();

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_JOBS_JOB_OWNERSHIP_H_
