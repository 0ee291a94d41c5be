// The workers of a job and their leases: registration (a worker id bound
// to its device while it holds a lease), heartbeats, declaring expired
// workers lost, and a worker finishing — DONE, LEFT or failed — which may
// end the job. Every change is written to the store before memory.
//
// Thread safety: none; JobRegistry calls it under its lock (job_table.h).
#ifndef PIPEPLAN_SERVER_JOBS_WORKER_LEASES_H_
#define PIPEPLAN_SERVER_JOBS_WORKER_LEASES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job_table.h"
#include "replication_sync.h"

namespace pipeplan::server::internal {

class WorkerLeases {
 public:
  WorkerLeases(const RegistryContext* ctx, JobTable* table, ReplicationSync* sync)
      : ctx_(ctx), table_(table), sync_(sync) {}

  // What can be refused before the job is looked up: ids, sizes, signs.
  static absl::Status CheckInfo(const v1::WorkerInfo& info);
  // Registers (or re-registers) `info` with `job` (see JobRegistry).
  absl::StatusOr<v1::Assignment> Register(Job& job, const v1::WorkerInfo& info);
  // Renews `w`'s lease; a lost or done worker is active again.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(Job& job, Worker& w);
  // `reporter`'s transport of plan `version` failed, the sockets to
  // `devices` closed or reset. A peer process that dies closes its sockets
  // (kill -9 included), and so does a live one that dropped the step: the
  // live one reports the same failure itself (at once, as `reporter` did),
  // the dead one never does. So each ACTIVE worker on those devices that has
  // not reported a failure of `version` keeps its lease only for the
  // suspect grace more: CheckLeases declares a dead one lost within about a
  // second instead of a lease. A live one whose report comes later renews
  // its lease with it. A live worker that closes a version (a leave, a
  // switch) reports it the same way. Workers with a rank on the same host
  // (Device.host) as a named device are suspects as well, for half a lease
  // (at least twice the grace): a host that went away took them too, though
  // no peer may have talked to them, and a live one heartbeats within it.
  void ReportPeerFailure(Job& job, Worker& reporter, int64_t version,
                         const std::vector<std::string>& devices);
  // Marks workers whose lease expired lost; returns how many.
  int CheckLeases();
  // `w` is done or left; the job may complete or fail (see JobRegistry).
  absl::StatusOr<v1::Job> Finish(Job& job, const v1::FinishWorkerRequest& request);
  // A lost worker that reports again is active again.
  absl::Status Revive(Worker& w, absl::Time now);

 private:
  // Stores `next` as `w`'s record, then sets it in memory; on a store error
  // `w` is unchanged.
  absl::Status Update(Worker& w, WorkerRecord next);
  // Whether `w`'s expired lease makes it lost; false after a failed write.
  bool Expire(const Job& job, Worker& w, absl::Time now);
  // The version whose ranks must all be done for the job to complete.
  std::shared_ptr<const v1::VersionedPlan> TrainedPlan(const Job& job, int64_t version) const;
  // The job's state after `request`, with its message.
  std::pair<v1::JobState, std::string> StateAfter(const Job& job,
                                                  const v1::FinishWorkerRequest& request,
                                                  bool leaving, const v1::Plan& trained) const;

  const RegistryContext* const ctx_;
  JobTable* const table_;
  ReplicationSync* const sync_;
};

}  // namespace pipeplan::server::internal

#endif  // PIPEPLAN_SERVER_JOBS_WORKER_LEASES_H_
