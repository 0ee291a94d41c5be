// What a replica of a replicated planner (a shared store, EnableReplication)
// does to see the others' writes: jobs and workers another replica created
// are read from the store on first use, heartbeats are queued for one
// batched write, expired leases are checked against heartbeats written
// elsewhere, and SyncFromStore's job heads move states forward and bring
// in workers and newer plan versions. Without replication every method is
// a no-op or answers from memory.
//
// Thread safety: none; JobRegistry calls it under its lock (job_table.h)
// and does the store reads that need no memory outside it.
#ifndef PIPEPLAN_SERVER_JOBS_REPLICATION_SYNC_H_
#define PIPEPLAN_SERVER_JOBS_REPLICATION_SYNC_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "job_table.h"

namespace pipeplan::server::internal {

class ReplicationSync {
 public:
  ReplicationSync(const RegistryContext* ctx, JobTable* table) : ctx_(ctx), table_(table) {}

  // The job in memory, then (replicated) the store's: one another replica
  // created since the last sync. Null when neither has it.
  Job* FindOrLoad(const std::string& job_id);
  // The job's worker, then (replicated) the store's record of it with its
  // newest report number. Null when neither has it.
  Worker* FindWorker(Job& job, const std::string& worker_id);

  // Queues `w`'s heartbeat for the store (at most every lease/4 per worker).
  void QueueHeartbeat(Worker& w, absl::Time now);
  // Whether expired `w` heartbeat through another replica (its lease then
  // runs from that heartbeat).
  bool HeartbeatElsewhere(Worker& w, absl::Time now) const;

  // SyncFromStore's first step: the heartbeats to write, and whether the
  // owned jobs' workers are due to be read again (every lease/2).
  struct Due {
    std::vector<WorkerHeartbeat> heartbeats;
    bool workers = false;
  };
  Due TakeDue(absl::Time now);
  // A job head moves the job's state forward (a cancelled job's watches
  // end); true when the store holds a newer plan version to read.
  bool ApplyHead(Job& job, const JobHead& head) const;
  // Workers of `stored` join memory; those memory holds take its state.
  void MergeWorkers(Job& job, StoredJob& stored) const;
  // Workers of `stored` this replica does not hold join, their leases
  // running from their stored heartbeats. True when one was added.
  bool Adopt(Job& job, StoredJob& stored) const;
  // Synced jobs that are gone from the store (deleted elsewhere).
  std::vector<std::string> Gone(const absl::flat_hash_set<std::string>& in_store) const;

 private:
  const RegistryContext* const ctx_;
  JobTable* const table_;
  // When the owned jobs' workers were last read.
  absl::Time last_workers_read_ = absl::InfinitePast();
  // Heartbeats to write with the next SyncFromStore.
  std::vector<WorkerHeartbeat> pending_heartbeats_;
};

}  // namespace pipeplan::server::internal

#endif  // PIPEPLAN_SERVER_JOBS_REPLICATION_SYNC_H_
