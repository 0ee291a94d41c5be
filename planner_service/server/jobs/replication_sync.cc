#include "replication_sync.h"

#include <algorithm>
#include <utility>

namespace pipeplan::server::internal {
namespace {

// Step reports read when a worker first reaches this replica, at most.
constexpr int64_t kAdoptReportBytes = int64_t{8} << 20;

// Job states only move forward: pending, running, then an end.
int StateOrder(v1::JobState s) { return s == v1::JOB_PENDING ? 0 : s == v1::JOB_RUNNING ? 1 : 2; }

}  // namespace

Job* ReplicationSync::FindOrLoad(const std::string& job_id) {
  if (Job* job = table_->Find(job_id); job || !ctx_->replicated()) return job;
  absl::StatusOr<StoredJob> stored = ctx_->store->LoadJob(job_id);
  if (!stored.ok()) return nullptr;
  // Created by another replica since this one's last sync.
  Job job = JobFromStored(*ctx_, *std::move(stored), ctx_->clock->Now());
  job.synced = true;
  Job& loaded = table_->Insert(std::move(job));
  table_->UpdateGauges();
  return &loaded;
}

Worker* ReplicationSync::FindWorker(Job& job, const std::string& worker_id) {
  if (auto it = job.workers.find(worker_id); it != job.workers.end()) return &it->second;
  if (!ctx_->replicated()) return nullptr;
  // Registered through another replica.
  absl::StatusOr<WorkerRecord> stored = ctx_->store->GetWorker(job.record.id, worker_id);
  if (!stored.ok()) return nullptr;
  const absl::Time now = ctx_->clock->Now();
  Worker& w = job.workers[worker_id] = Worker{*std::move(stored), now + ctx_->options.lease};
  w.stored_heartbeat = absl::FromUnixMillis(w.record.last_heartbeat_unix_ms);
  // Its newest stored report (newest first), so that a report it resends
  // after its replica died is not stored twice.
  if (auto reports = ctx_->store->RecentStepReports(job.record.id, 1'000, kAdoptReportBytes);
      reports.ok()) {
    for (const v1::ReportStepRequest& r : *reports) {
      if (r.worker_id() != worker_id) continue;
      if (w.report_run_id.empty()) w.report_run_id = r.run_id();
      if (r.run_id() == w.report_run_id) w.report_seq = std::max(w.report_seq, r.seq());
      w.record.last_step = std::max(w.record.last_step, r.step());
    }
  }
  table_->UpdateGauges();
  return &w;
}

void ReplicationSync::QueueHeartbeat(Worker& w, absl::Time now) {
  if (!ctx_->replicated() || now - w.stored_heartbeat < ctx_->options.lease / 4) return;
  // Written in batches by SyncFromStore (every ~200 ms): one statement for
  // all of this replica's workers instead of one per heartbeat.
  w.stored_heartbeat = now;
  pending_heartbeats_.push_back(
      {w.record.job_id, w.record.info.worker_id(), absl::ToUnixMillis(now)});
}

bool ReplicationSync::HeartbeatElsewhere(Worker& w, absl::Time now) const {
  if (!ctx_->replicated()) return false;
  absl::StatusOr<WorkerRecord> stored =
      ctx_->store->GetWorker(w.record.job_id, w.record.info.worker_id());
  if (!stored.ok()) return false;
  const absl::Time seen = absl::FromUnixMillis(stored->last_heartbeat_unix_ms);
  if (seen + ctx_->options.lease <= now) return false;
  w.lease_expiry = seen + ctx_->options.lease;
  w.record.last_heartbeat_unix_ms = stored->last_heartbeat_unix_ms;
  return true;
}

ReplicationSync::Due ReplicationSync::TakeDue(absl::Time now) {
  Due due;
  due.heartbeats.swap(pending_heartbeats_);
  // The owner watches every worker of its jobs, also those that registered
  // through other replicas: every lease/2 it reads its jobs' workers.
  if (now - last_workers_read_ >= ctx_->options.lease / 2) {
    last_workers_read_ = now;
    due.workers = true;
  }
  return due;
}

bool ReplicationSync::ApplyHead(Job& job, const JobHead& head) const {
  job.synced = true;
  if (StateOrder(head.state) > StateOrder(job.record.state)) {
    job.record.state = head.state;
    job.record.failure_message = head.failure_message;
    if (head.state == v1::JOB_CANCELLED) CloseWatches(job, JobCancelled(head.id));
  }
  return head.current_version > job.record.current_version;
}

void ReplicationSync::MergeWorkers(Job& job, StoredJob& stored) const {
  for (WorkerRecord& w : stored.workers) {
    auto it = job.workers.find(w.info.worker_id());
    if (it == job.workers.end()) {
      job.workers[w.info.worker_id()] =
          Worker{std::move(w), ctx_->clock->Now() + ctx_->options.lease};
    } else {
      it->second.record.state = w.state;
    }
  }
}

bool ReplicationSync::Adopt(Job& job, StoredJob& stored) const {
  bool added = false;
  for (WorkerRecord& w : stored.workers) {
    if (job.workers.contains(w.info.worker_id())) continue;
    // Its lease runs from the heartbeat another replica stored.
    const absl::Time seen = absl::FromUnixMillis(w.last_heartbeat_unix_ms);
    const std::string id = w.info.worker_id();
    Worker& adopted = job.workers[id] = Worker{std::move(w), seen + ctx_->options.lease};
    adopted.stored_heartbeat = seen;
    added = true;
  }
  return added;
}

std::vector<std::string> ReplicationSync::Gone(
    const absl::flat_hash_set<std::string>& in_store) const {
  std::vector<std::string> gone;
  for (const auto& [id, job] : table_->jobs()) {
    if (job.synced && !in_store.contains(id)) gone.push_back(id);
  }
  return gone;
}

}  // namespace pipeplan::server::internal
