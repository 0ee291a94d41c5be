#include "pipeplan/server/job_registry.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/server/log.h"
#include "pipeplan/server/metrics.h"
#include "pipeplan/server/release_memory.h"

namespace pipeplan::server {
namespace {

constexpr size_t kMaxIdBytes = 256;
// Step reports Recover reads per job, at most.
constexpr int64_t kRecoverReportBytes = int64_t{64} << 20;
// Step reports read when a worker first reaches this replica, at most.
constexpr int64_t kAdoptReportBytes = int64_t{8} << 20;
// Freeing at least this much makes DeleteJob return memory to the OS.
constexpr int64_t kReleaseMemoryBytes = 1 << 20;

// Job ids come from one random generator shared by every registry.
ABSL_CONST_INIT absl::Mutex g_id_mu(absl::kConstInit);
std::mt19937_64* g_id_rng ABSL_PT_GUARDED_BY(g_id_mu) = nullptr;

std::string NewJobId() {
  absl::MutexLock l(&g_id_mu);
  if (g_id_rng == nullptr) g_id_rng = new std::mt19937_64(std::random_device{}());
  return absl::StrFormat("job-%016x", (*g_id_rng)());
}

absl::Status CheckId(const std::string& field, const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is required"));
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is longer than ", kMaxIdBytes, " bytes"));
  }
  return absl::OkStatus();
}

// RESOURCE_EXHAUSTED that names the limit as its planner flag and its value.
absl::Status OverLimit(absl::string_view what, absl::string_view flag, int64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(what, ", over the limit --", flag, "=", limit));
}

// "v<N>/...": the plan version workers put in front of their keys; -1 for
// a key without one.
int64_t KeyVersion(const std::string& key) {
  const size_t slash = key.find('/');
  int64_t version = 0;
  if (key.size() < 3 || key[0] != 'v' || slash == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(key).substr(1, slash - 1), &version) || version < 0) {
    return -1;
  }
  return version;
}

absl::Status JobNotFound(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" not found"));
}

absl::Status JobCancelled(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" was cancelled"));
}

}  // namespace

JobRegistry::JobRegistry(Store* store, const Clock* clock, Options options, Metrics* metrics)
    : store_(store), clock_(clock), options_(options), metrics_(metrics) {}

JobRegistry::Job JobRegistry::JobFromStored(StoredJob sj, absl::Time now) const {
  Job job;
  job.record = sj.job;
  job.current = std::make_shared<const v1::VersionedPlan>(std::move(sj.current));
  // Workers' last steps and last report numbers come from the stored
  // reports (not rewritten per report; newest first): the newest ones,
  // bounded in bytes, cover every live worker.
  absl::flat_hash_map<std::string, int64_t> last_step;
  absl::flat_hash_map<std::string, std::pair<std::string, int64_t>> last_seq;
  if (auto reports = store_->RecentStepReports(sj.job.id, 100'000, kRecoverReportBytes);
      reports.ok()) {
    for (const v1::ReportStepRequest& r : *reports) {
      auto [it, inserted] = last_step.emplace(r.worker_id(), r.step());
      if (!inserted) it->second = std::max(it->second, r.step());
      auto [seq, first] = last_seq.emplace(r.worker_id(), std::make_pair(r.run_id(), r.seq()));
      if (!first && seq->second.first == r.run_id()) {
        seq->second.second = std::max(seq->second.second, r.seq());
      }
    }
  }
  for (WorkerRecord& w : sj.workers) {
    std::string id = w.info.worker_id();
    if (auto it = last_step.find(id); it != last_step.end()) {
      w.last_step = std::max(w.last_step, it->second);
    }
    // Grace: workers learn of the restart only when their channel
    // reconnects (backoff up to 1 s) and their next heartbeat (lease/3)
    // gets through, so they get two leases before anyone is declared lost.
    Worker& worker = job.workers[id] = Worker{std::move(w), now + 2 * options_.lease};
    if (auto it = last_seq.find(id); it != last_seq.end()) {
      worker.report_run_id = it->second.first;
      worker.report_seq = it->second.second;
    }
  }
  return job;
}

absl::Status JobRegistry::Recover() {
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StoredJob> stored, store_->Load());
  absl::MutexLock l(&mu_);
  const absl::Time now = clock_->Now();
  for (StoredJob& sj : stored) {
    Job job = JobFromStored(std::move(sj), now);
    job.synced = ownership_ != nullptr;
    if (metrics_) {
      metrics_->SetPlan(job.record.id, job.record.current_version,
                        job.current->plan().step_seconds(), job.current->plan().bubble_ratio());
    }
    LogInfo("job_recovered", {{"job", job.record.id},
                              {"plan_version", absl::StrCat(job.record.current_version)},
                              {"workers", absl::StrCat(job.workers.size())}});
    jobs_[job.record.id] = std::move(job);
  }
  UpdateGaugesLocked();
  return absl::OkStatus();
}

JobRegistry::Job* JobRegistry::FindLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobRegistry::EnableReplication(JobOwnership* ownership) { ownership_ = ownership; }

bool JobRegistry::Owns(const std::string& job_id) const {
  return ownership_ == nullptr || ownership_->Lease(job_id).has_value();
}

JobRegistry::Job* JobRegistry::FindOrLoadLocked(const std::string& job_id) {
  if (Job* job = FindLocked(job_id); job || !ownership_) return job;
  absl::StatusOr<StoredJob> stored = store_->LoadJob(job_id);
  if (!stored.ok()) return nullptr;
  // Created by another replica since this one's last sync.
  Job job = JobFromStored(*std::move(stored), clock_->Now());
  job.synced = true;
  auto [it, inserted] = jobs_.emplace(job_id, std::move(job));
  UpdateGaugesLocked();
  return &it->second;
}

JobRegistry::Worker* JobRegistry::FindWorkerLocked(Job& job, const std::string& worker_id) {
  if (auto it = job.workers.find(worker_id); it != job.workers.end()) return &it->second;
  if (!ownership_) return nullptr;
  // Registered through another replica.
  absl::StatusOr<WorkerRecord> stored = store_->GetWorker(job.record.id, worker_id);
  if (!stored.ok()) return nullptr;
  const absl::Time now = clock_->Now();
  Worker& w = job.workers[worker_id] = Worker{*std::move(stored), now + options_.lease};
  w.stored_heartbeat = absl::FromUnixMillis(w.record.last_heartbeat_unix_ms);
  // Its newest stored report (newest first), so that a report it resends
  // after its replica died is not stored twice.
  if (auto reports = store_->RecentStepReports(job.record.id, 1'000, kAdoptReportBytes);
      reports.ok()) {
    for (const v1::ReportStepRequest& r : *reports) {
      if (r.worker_id() != worker_id) continue;
      if (w.report_run_id.empty()) w.report_run_id = r.run_id();
      if (r.run_id() == w.report_run_id) w.report_seq = std::max(w.report_seq, r.seq());
      w.record.last_step = std::max(w.record.last_step, r.step());
    }
  }
  UpdateGaugesLocked();
  return &w;
}

void JobRegistry::StoreHeartbeatLocked(Worker& w, absl::Time now) {
  if (!ownership_ || now - w.stored_heartbeat < options_.lease / 4) return;
  // Written in batches by SyncFromStore (every ~200 ms): one statement for
  // all of this replica's workers instead of one per heartbeat.
  w.stored_heartbeat = now;
  pending_heartbeats_.push_back(
      {w.record.job_id, w.record.info.worker_id(), absl::ToUnixMillis(now)});
}

bool JobRegistry::HeartbeatElsewhereLocked(Worker& w, absl::Time now) {
  if (!ownership_) return false;
  absl::StatusOr<WorkerRecord> stored =
      store_->GetWorker(w.record.job_id, w.record.info.worker_id());
  if (!stored.ok()) return false;
  const absl::Time seen = absl::FromUnixMillis(stored->last_heartbeat_unix_ms);
  if (seen + options_.lease <= now) return false;
  w.lease_expiry = seen + options_.lease;
  w.record.last_heartbeat_unix_ms = stored->last_heartbeat_unix_ms;
  return true;
}

absl::Status JobRegistry::SyncFromStore() {
  if (!ownership_) return absl::OkStatus();
  std::vector<WorkerHeartbeat> heartbeats;
  // The owner watches every worker of its jobs, also those that registered
  // through other replicas: every lease/2 it reads its jobs' workers.
  bool workers_due = false;
  {
    absl::MutexLock l(&mu_);
    heartbeats.swap(pending_heartbeats_);
    if (const absl::Time now = clock_->Now();
        now - last_owned_workers_read_ >= options_.lease / 2) {
      last_owned_workers_read_ = now;
      workers_due = true;
    }
  }
  if (absl::Status touched = store_->TouchWorkers(heartbeats); !touched.ok()) {
    // Best effort: the owner sees older times; the workers' next
    // heartbeats are written with the next batch.
    LogWarn("heartbeats_not_stored", {{"error", std::string(touched.message())}});
  }
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<JobHead> heads, store_->JobHeads());
  ownership_->Tick(heads);
  absl::flat_hash_map<std::string, bool> in_store;
  for (const JobHead& head : heads) {
    in_store[head.id] = true;
    SyncJob(head);
    if (workers_due && ownership_->Lease(head.id)) AdoptStoredWorkers(head.id);
  }
  absl::MutexLock l(&mu_);
  std::vector<std::string> gone;
  for (const auto& [id, job] : jobs_) {
    if (job.synced && !in_store.contains(id)) gone.push_back(id);
  }
  for (const std::string& id : gone) {
    Job& job = jobs_.find(id)->second;
    const absl::Status closed = absl::NotFoundError(absl::StrCat("job \"", id, "\" was deleted"));
    for (WatchEntry& w : job.watches) {
      if (auto watcher = w.watcher.lock()) watcher->OnClose(closed);
    }
    rendezvous_bytes_ -= job.rendezvous_bytes;
    if (metrics_) metrics_->RemoveJob(id);
    jobs_.erase(id);
    LogInfo("job_deleted", {{"job", id}, {"by", "another planner"}});
  }
  if (!gone.empty()) UpdateGaugesLocked();
  return absl::OkStatus();
}

namespace {
// Job states only move forward: pending, running, then an end.
int StateOrder(v1::JobState s) { return s == v1::JOB_PENDING ? 0 : s == v1::JOB_RUNNING ? 1 : 2; }
}  // namespace

void JobRegistry::AdoptStoredWorkers(const std::string& job_id) {
  if (!ownership_) return;
  absl::StatusOr<StoredJob> stored = store_->LoadJob(job_id);
  if (!stored.ok()) return;
  absl::MutexLock l(&mu_);
  Job* job = FindLocked(job_id);
  if (job == nullptr) return;
  bool added = false;
  for (WorkerRecord& w : stored->workers) {
    if (job->workers.contains(w.info.worker_id())) continue;
    // Its lease runs from the heartbeat another replica stored.
    const absl::Time seen = absl::FromUnixMillis(w.last_heartbeat_unix_ms);
    const std::string id = w.info.worker_id();
    Worker& adopted = job->workers[id] = Worker{std::move(w), seen + options_.lease};
    adopted.stored_heartbeat = seen;
    added = true;
  }
  if (added) UpdateGaugesLocked();
}

void JobRegistry::SyncJob(const JobHead& head) {
  std::shared_ptr<const v1::VersionedPlan> newer;
  {
    absl::MutexLock l(&mu_);
    Job* job = FindLocked(head.id);
    if (job == nullptr) {
      FindOrLoadLocked(head.id);
      return;
    }
    job->synced = true;
    if (StateOrder(head.state) > StateOrder(job->record.state)) {
      job->record.state = head.state;
      job->record.failure_message = head.failure_message;
      if (head.state == v1::JOB_CANCELLED) {
        const absl::Status closed = JobCancelled(head.id);
        for (WatchEntry& w : job->watches) {
          if (auto watcher = w.watcher.lock()) watcher->OnClose(closed);
        }
        job->watches.clear();
      }
    }
    if (head.current_version <= job->record.current_version) return;
  }
  // Another replica published: read the version (and the workers it
  // reranked) outside the lock, then apply it unless it was meanwhile.
  absl::StatusOr<StoredJob> stored = store_->LoadJob(head.id);
  if (!stored.ok()) return;
  absl::MutexLock l(&mu_);
  if (Job* job = FindLocked(head.id)) ApplyStoredLocked(*job, *std::move(stored));
}

void JobRegistry::ApplyStoredLocked(Job& job, StoredJob stored) {
  if (stored.job.current_version <= job.record.current_version) return;
  for (WorkerRecord& w : stored.workers) {
    auto it = job.workers.find(w.info.worker_id());
    if (it == job.workers.end()) {
      job.workers[w.info.worker_id()] = Worker{std::move(w), clock_->Now() + options_.lease};
    } else {
      it->second.record.state = w.state;
    }
  }
  ApplyPlanLocked(job, std::make_shared<const v1::VersionedPlan>(std::move(stored.current)));
  UpdateGaugesLocked();
}

absl::Status JobRegistry::UpdateWorkerLocked(Worker& w, WorkerRecord next) {
  PIPEPLAN_RETURN_IF_ERROR(store_->PutWorker(next));
  w.record = std::move(next);
  return absl::OkStatus();
}

const JobRegistry::Job* JobRegistry::FindLocked(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

v1::Job JobRegistry::ToProtoLocked(const Job& job, bool with_plan) const {
  v1::Job out;
  out.set_id(job.record.id);
  out.set_name(job.record.name);
  out.set_plan_version(job.record.current_version);
  out.set_create_time_unix_ms(job.record.create_time_unix_ms);
  if (with_plan) *out.mutable_plan() = job.current->plan();
  if (job.record.training.ByteSizeLong() > 0) *out.mutable_training() = job.record.training;
  out.set_state(job.record.state);
  out.set_failure_message(job.record.failure_message);
  std::vector<const Worker*> workers;
  for (const auto& [id, w] : job.workers) workers.push_back(&w);
  std::sort(workers.begin(), workers.end(), [](const Worker* a, const Worker* b) {
    return a->record.info.worker_id() < b->record.info.worker_id();
  });
  for (const Worker* w : workers) {
    v1::WorkerStatus* ws = out.add_workers();
    *ws->mutable_info() = w->record.info;
    ws->set_rank(w->record.rank);
    ws->set_state(w->record.state);
    ws->set_last_heartbeat_unix_ms(w->record.last_heartbeat_unix_ms);
    ws->set_last_step(w->record.last_step);
  }
  out.set_num_workers(static_cast<int>(job.workers.size()));
  return out;
}

void JobRegistry::UpdateGaugesLocked() const {
  if (!metrics_) return;
  int active = 0, lost = 0;
  for (const auto& [id, job] : jobs_) {
    for (const auto& [wid, w] : job.workers) {
      if (w.record.state == v1::WORKER_LOST) ++lost;
      if (w.record.state == v1::WORKER_ACTIVE) ++active;
    }
  }
  metrics_->SetJobs(static_cast<int>(jobs_.size()));
  metrics_->SetWorkers(active, lost);
}

absl::StatusOr<v1::Job> JobRegistry::CreateJob(const std::string& name,
                                               const v1::PlanRequest& request, const v1::Plan& plan,
                                               const v1::TrainingSpec& training) {
  if (name.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("name is longer than ", kMaxIdBytes, " bytes"));
  }
  absl::MutexLock l(&mu_);
  if (static_cast<int>(jobs_.size()) >= options_.max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the planner holds the maximum of ", options_.max_jobs, " jobs"));
  }
  Job job;
  do {
    job.record.id = NewJobId();
  } while (jobs_.contains(job.record.id));
  job.record.name = std::string(name);
  job.record.create_time_unix_ms = absl::ToUnixMillis(clock_->Now());
  job.record.current_version = 1;
  job.record.training = training;
  job.record.state = v1::JOB_PENDING;
  v1::VersionedPlan first;
  first.set_job_id(job.record.id);
  first.set_version(1);
  *first.mutable_plan() = plan;
  *first.mutable_request() = request;
  first.set_reason("created");
  PIPEPLAN_RETURN_IF_ERROR(store_->CreateJob(job.record, first));
  if (ownership_) {
    // Its creator owns it first; a failed claim leaves it to the next
    // replica's sync, which claims jobs without a live owner.
    job.synced = true;
    if (auto claimed = ownership_->Claim(job.record.id, /*force=*/false); !claimed.ok()) {
      LogWarn("job_not_claimed",
              {{"job", job.record.id}, {"error", std::string(claimed.status().message())}});
    }
  }
  job.current = std::make_shared<const v1::VersionedPlan>(std::move(first));
  const std::string id = job.record.id;
  auto [it, inserted] = jobs_.emplace(id, std::move(job));
  if (metrics_) {
    metrics_->SetPlan(id, 1, it->second.current->plan().step_seconds(),
                      it->second.current->plan().bubble_ratio());
  }
  UpdateGaugesLocked();
  LogInfo("job_created", {{"job", id}, {"name", std::string(name)}, {"plan_version", "1"}});
  return ToProtoLocked(it->second, /*with_plan=*/true);
}

absl::StatusOr<v1::Job> JobRegistry::GetJob(const std::string& job_id) const {
  {
    absl::ReaderMutexLock l(&mu_);
    if (const Job* job = FindLocked(job_id)) return ToProtoLocked(*job, /*with_plan=*/true);
    if (!ownership_) return JobNotFound(job_id);
  }
  // Replicated: a job another replica created since this one's last sync.
  absl::StatusOr<StoredJob> stored = store_->LoadJob(job_id);
  if (stored.status().code() == absl::StatusCode::kNotFound) return JobNotFound(job_id);
  if (!stored.ok()) return stored.status();
  const Job job = JobFromStored(*std::move(stored), clock_->Now());
  absl::ReaderMutexLock l(&mu_);
  return ToProtoLocked(job, /*with_plan=*/true);
}

std::vector<v1::Job> JobRegistry::ListJobs() const {
  absl::ReaderMutexLock l(&mu_);
  std::vector<v1::Job> out;
  for (const auto& [id, job] : jobs_) out.push_back(ToProtoLocked(job, /*with_plan=*/false));
  std::sort(out.begin(), out.end(), [](const v1::Job& a, const v1::Job& b) {
    return a.create_time_unix_ms() != b.create_time_unix_ms()
               ? a.create_time_unix_ms() < b.create_time_unix_ms()
               : a.id() < b.id();
  });
  return out;
}

absl::Status JobRegistry::DeleteJob(const std::string& job_id) {
  int64_t freed = 0;
  {
    absl::MutexLock l(&mu_);
    Job* job = FindLocked(job_id);
    if (!job) return JobNotFound(job_id);
    PIPEPLAN_RETURN_IF_ERROR(store_->DeleteJob(job_id));
    const absl::Status closed =
        absl::NotFoundError(absl::StrCat("job \"", job_id, "\" was deleted"));
    for (WatchEntry& w : job->watches) {
      if (auto watcher = w.watcher.lock()) watcher->OnClose(closed);
    }
    if (metrics_) metrics_->RemoveJob(std::string(job_id));
    freed = job->rendezvous_bytes;
    rendezvous_bytes_ -= freed;
    LogInfo("job_deleted",
            {{"job", std::string(job_id)}, {"rendezvous_bytes", absl::StrCat(freed)}});
    jobs_.erase(jobs_.find(job_id));
    UpdateGaugesLocked();
  }
  // Hand the freed pages back to the OS rather than keep them in malloc's
  // free lists, so a deleted job's rendezvous memory leaves the RSS too.
  if (freed >= kReleaseMemoryBytes) ReleaseFreedMemory();
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobRegistry::CancelJob(const std::string& job_id,
                                               const std::string& reason) {
  int64_t freed = 0;
  absl::StatusOr<v1::Job> out = MarkCancelled(job_id, reason, &freed);
  // As in DeleteJob: a cancelled job's rendezvous memory leaves the RSS.
  if (freed >= kReleaseMemoryBytes) ReleaseFreedMemory();
  return out;
}

absl::StatusOr<v1::Job> JobRegistry::MarkCancelled(const std::string& job_id,
                                                   const std::string& reason, int64_t* freed) {
  absl::MutexLock l(&mu_);
  Job* job = FindLocked(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return ToProtoLocked(*job, /*with_plan=*/true);
  if (job->record.state != v1::JOB_RUNNING && job->record.state != v1::JOB_PENDING) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " already ended (",
                                                      v1::JobState_Name(job->record.state),
                                                      "); nothing to cancel"));
  }
  const std::string message = reason.empty() ? "cancelled" : absl::StrCat("cancelled: ", reason);
  PIPEPLAN_RETURN_IF_ERROR(SetJobStateInStore(job_id, v1::JOB_CANCELLED, message));
  job->record.state = v1::JOB_CANCELLED;
  job->record.failure_message = message;
  // Workers learn it as they would a deletion: their stream ends NOT_FOUND.
  const absl::Status closed = JobCancelled(job_id);
  for (WatchEntry& w : job->watches) {
    if (auto watcher = w.watcher.lock()) watcher->OnClose(closed);
  }
  job->watches.clear();
  // Nothing rendezvous through a cancelled job again (RendezvousSet refuses).
  *freed = job->rendezvous_bytes;
  rendezvous_bytes_ -= *freed;
  job->rendezvous_bytes = 0;
  job->rendezvous = {};
  UpdateGaugesLocked();
  LogInfo("job_state", {{"job", job_id}, {"state", "JOB_CANCELLED"}, {"message", message}});
  return ToProtoLocked(*job, /*with_plan=*/true);
}

absl::StatusOr<v1::VersionedPlan> JobRegistry::GetPlan(const std::string& job_id,
                                                       int64_t version) const {
  {
    absl::ReaderMutexLock l(&mu_);
    const Job* job = FindLocked(job_id);
    if (!job && ownership_ && version > 0) return store_->GetPlan(job_id, version);
    if (!job && ownership_) {
      absl::StatusOr<StoredJob> stored = store_->LoadJob(job_id);
      if (stored.ok()) return std::move(stored->current);
    }
    if (!job) return JobNotFound(job_id);
    if (version < 0) {
      return absl::InvalidArgumentError(absl::StrCat("version must be >= 0, got ", version));
    }
    if (version == 0 || version == job->record.current_version) return *job->current;
    if (version > job->record.current_version && !ownership_) {
      return absl::NotFoundError(absl::StrCat("job ", job_id, " has no plan version ", version,
                                              " (current is ", job->record.current_version, ")"));
    }
  }
  return store_->GetPlan(job_id, version);
}

std::shared_ptr<const v1::PlanUpdate> JobRegistry::UpdateFor(const Job& job,
                                                             const std::string& worker_id) const {
  auto update = std::make_shared<v1::PlanUpdate>();
  update->set_job_id(job.record.id);
  update->set_version(job.record.current_version);
  *update->mutable_plan() = job.current->plan();
  int rank = -1;
  if (auto it = job.workers.find(worker_id); it != job.workers.end()) {
    rank = RankOfDevice(job.current->plan(), it->second.record.info.device_id());
  }
  update->set_rank(rank);
  return update;
}

absl::StatusOr<int64_t> JobRegistry::PublishPlan(const std::string& job_id,
                                                 const v1::PlanRequest& request,
                                                 const v1::Plan& plan, const std::string& reason,
                                                 int64_t expected_version, PublishAs as) {
  absl::MutexLock l(&mu_);
  Job* job = FindOrLoadLocked(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " was cancelled; it gets no new plan versions"));
  }
  if (expected_version > 0 && job->record.current_version != expected_version) {
    return absl::AbortedError(absl::StrCat("job ", job_id, " is at plan version ",
                                           job->record.current_version, ", not ",
                                           expected_version));
  }
  v1::VersionedPlan next;
  next.set_job_id(job->record.id);
  next.set_version(job->record.current_version + 1);
  *next.mutable_plan() = plan;
  *next.mutable_request() = request;
  next.set_reason(std::string(reason));
  PIPEPLAN_RETURN_IF_ERROR(AppendPlanToStore(next, as));
  if (ownership_) {
    // Best effort, as in memory: the keys of versions before the previous.
    (void)store_->RendezvousTrim(job_id, next.version() - 1);
  }
  ApplyPlanLocked(*job, std::make_shared<const v1::VersionedPlan>(std::move(next)));
  return job->record.current_version;
}

absl::Status JobRegistry::AppendPlanToStore(const v1::VersionedPlan& plan, PublishAs as) {
  if (!ownership_) return store_->AppendPlan(plan);
  std::optional<JobLease> lease = ownership_->Lease(plan.job_id());
  if (!lease && as == PublishAs::kOwner) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", plan.job_id(), " is owned by another planner; only its owner replans it"));
  }
  if (!lease) {
    // An operator's replan here takes the job over: the next token fences
    // the previous owner out.
    PIPEPLAN_ASSIGN_OR_RETURN(JobLease taken, ownership_->Claim(plan.job_id(), /*force=*/true));
    lease = taken;
  }
  absl::Status s = store_->AppendPlanFenced(plan, *lease);
  if (s.code() == absl::StatusCode::kFailedPrecondition) ownership_->Drop(plan.job_id());
  return s;
}

absl::Status JobRegistry::SetJobStateInStore(const std::string& job_id, v1::JobState state,
                                             const std::string& message) {
  if (ownership_) {
    if (std::optional<JobLease> lease = ownership_->Lease(job_id)) {
      absl::Status s = store_->SetJobStateFenced(job_id, state, message, *lease);
      if (s.code() == absl::StatusCode::kFailedPrecondition) ownership_->Drop(job_id);
      return s;
    }
  }
  // Not the owner: a state a worker or an operator reports (running, done,
  // failed, cancelled) is a fact, written as such.
  return store_->SetJobState(job_id, state, message);
}

void JobRegistry::ApplyPlanLocked(Job& job, std::shared_ptr<const v1::VersionedPlan> plan) {
  job.record.current_version = plan->version();
  job.current = std::move(plan);
  // Workers switching from the previous version may still read its keys.
  DropRendezvousBeforeLocked(job, job.record.current_version - 1);
  // New ranks for the new plan.
  for (auto& [wid, w] : job.workers) {
    w.record.rank = RankOfDevice(job.current->plan(), w.record.info.device_id());
  }
  std::vector<WatchEntry> alive;
  for (WatchEntry& w : job.watches) {
    if (auto watcher = w.watcher.lock()) {
      watcher->OnPlan(UpdateFor(job, w.worker_id));
      alive.push_back(std::move(w));
    }
  }
  job.watches = std::move(alive);
  if (metrics_) {
    metrics_->SetPlan(job.record.id, job.record.current_version, job.current->plan().step_seconds(),
                      job.current->plan().bubble_ratio());
  }
  LogInfo("plan_published", {{"job", job.record.id},
                             {"plan_version", absl::StrCat(job.record.current_version)},
                             {"reason", job.current->reason()},
                             {"watchers", absl::StrCat(job.watches.size())}});
}

absl::StatusOr<v1::Assignment> JobRegistry::RegisterWorker(const std::string& job_id,
                                                           const v1::WorkerInfo& info) {
  PIPEPLAN_RETURN_IF_ERROR(CheckId("worker.worker_id", info.worker_id()));
  PIPEPLAN_RETURN_IF_ERROR(CheckId("worker.device_id", info.device_id()));
  if (info.host().size() > kMaxIdBytes || info.transport_address().size() > kMaxIdBytes) {
    return absl::InvalidArgumentError("worker.host or worker.transport_address is too long");
  }
  if (!(info.memory_bytes() >= 0) || !(info.measured_bandwidth_bytes_per_second() >= 0)) {
    return absl::InvalidArgumentError(
        "worker.memory_bytes and worker.measured_bandwidth_bytes_per_second must be >= 0");
  }
  absl::MutexLock l(&mu_);
  Job* job = FindOrLoadLocked(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  FindWorkerLocked(*job, info.worker_id());  // replicated: registered elsewhere before
  const v1::ClusterTopology& cluster = job->current->request().cluster();
  const bool known_device =
      std::any_of(cluster.devices().begin(), cluster.devices().end(),
                  [&](const v1::Device& d) { return d.id() == info.device_id(); });
  if (!known_device) {
    return absl::InvalidArgumentError(absl::StrCat("worker.device_id \"", info.device_id(),
                                                   "\" is not a device of job ", job_id,
                                                   "'s cluster"));
  }
  auto it = job->workers.find(info.worker_id());
  if (it != job->workers.end() && it->second.record.state == v1::WORKER_ACTIVE &&
      it->second.record.info.device_id() != info.device_id()) {
    // Two processes with one id would take turns rewriting the record (and
    // the rank): the second one is refused while the first holds its lease.
    return absl::AlreadyExistsError(absl::StrCat(
        "worker id \"", info.worker_id(), "\" is already registered with job ", job_id,
        " on device ", it->second.record.info.device_id(), ", not ", info.device_id(),
        ": give each worker its own --worker-id (a worker id is bound to its device until "
        "its lease runs out)"));
  }
  if (it == job->workers.end() &&
      static_cast<int>(job->workers.size()) >= options_.max_workers_per_job) {
    return absl::ResourceExhaustedError(absl::StrCat("job ", job_id, " already has the maximum of ",
                                                     options_.max_workers_per_job, " workers"));
  }
  const absl::Time now = clock_->Now();
  WorkerRecord rec;
  rec.job_id = job->record.id;
  rec.info = info;
  rec.rank = RankOfDevice(job->current->plan(), info.device_id());
  rec.state = v1::WORKER_ACTIVE;
  rec.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  rec.last_step = it == job->workers.end() ? -1 : it->second.record.last_step;
  PIPEPLAN_RETURN_IF_ERROR(store_->PutWorker(rec));
  const bool reconnect = it != job->workers.end();
  Worker next{rec, now + options_.lease};
  next.stored_heartbeat = now;
  if (reconnect) {
    next.report_run_id = it->second.report_run_id;
    next.report_seq = it->second.report_seq;
  }
  job->workers[info.worker_id()] = std::move(next);
  UpdateGaugesLocked();
  LogInfo(reconnect ? "worker_reregistered" : "worker_registered",
          {{"job", job->record.id},
           {"plan_version", absl::StrCat(job->record.current_version)},
           {"worker", info.worker_id()},
           {"device", info.device_id()},
           {"rank", absl::StrCat(rec.rank)}});
  v1::Assignment a;
  a.set_job_id(job->record.id);
  a.set_worker_id(info.worker_id());
  a.set_rank(rec.rank);
  a.set_plan_version(job->record.current_version);
  a.set_lease_seconds(absl::ToDoubleSeconds(options_.lease));
  return a;
}

absl::StatusOr<v1::HeartbeatResponse> JobRegistry::Heartbeat(const std::string& job_id,
                                                             const std::string& worker_id) {
  absl::MutexLock l(&mu_);
  Job* job = FindOrLoadLocked(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  Worker* found = FindWorkerLocked(*job, worker_id);
  if (found == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker \"", worker_id, "\" is not registered with job ", job_id, "; call RegisterWorker"));
  }
  Worker& w = *found;
  const absl::Time now = clock_->Now();
  if (w.record.state != v1::WORKER_ACTIVE) {
    WorkerRecord back = w.record;
    back.state = v1::WORKER_ACTIVE;
    back.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
    PIPEPLAN_RETURN_IF_ERROR(UpdateWorkerLocked(w, std::move(back)));
    UpdateGaugesLocked();
    LogInfo("worker_recovered", {{"job", job->record.id},
                                 {"plan_version", absl::StrCat(job->record.current_version)},
                                 {"worker", std::string(worker_id)}});
  }
  w.lease_expiry = now + options_.lease;
  w.record.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  StoreHeartbeatLocked(w, now);
  v1::HeartbeatResponse r;
  r.set_current_plan_version(job->record.current_version);
  r.set_lease_seconds(absl::ToDoubleSeconds(options_.lease));
  r.set_job_state(job->record.state);
  return r;
}

absl::StatusOr<double> JobRegistry::PlannedStepSeconds(const std::string& job_id) const {
  absl::ReaderMutexLock l(&mu_);
  const Job* job = FindLocked(job_id);
  if (!job) return JobNotFound(job_id);
  return job->current ? job->current->plan().step_seconds() : 0.0;
}

absl::StatusOr<v1::ReportStepResponse> JobRegistry::ReportStep(
    const v1::ReportStepRequest& report) {
  if (report.timings_size() > options_.max_report_timings) {
    return OverLimit(absl::StrCat("the step report has ", report.timings_size(), " timings"),
                     "max-report-timings", options_.max_report_timings);
  }
  if (const int64_t bytes = static_cast<int64_t>(report.ByteSizeLong());
      bytes > options_.max_report_bytes) {
    return OverLimit(absl::StrCat("the step report has ", bytes, " bytes"), "max-report-bytes",
                     options_.max_report_bytes);
  }
  absl::MutexLock l(&mu_);
  Job* job = FindOrLoadLocked(report.job_id());
  if (!job) return JobNotFound(report.job_id());
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(report.job_id());
  Worker* found = FindWorkerLocked(*job, report.worker_id());
  if (found == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker \"", report.worker_id(), "\" is not registered with job ", report.job_id()));
  }
  // A report of an older version is a step that really ran (the last one
  // before a switch, whose loss the user wants to see): it is kept, and the
  // answer's current_plan_version tells the worker to switch. Calibration
  // reads only the current version's reports. A version the job never had
  // is an error.
  if (ownership_ && report.plan_version() > job->record.current_version) {
    // Published by another replica since this one's last sync: catch up
    // rather than refuse a version that exists.
    if (absl::StatusOr<StoredJob> stored = store_->LoadJob(job->record.id); stored.ok()) {
      ApplyStoredLocked(*job, *std::move(stored));
    }
  }
  if (report.plan_version() > job->record.current_version || report.plan_version() < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "report for plan version ", report.plan_version(), " but job ", report.job_id(),
        " is at version ", job->record.current_version, "; switch plans and report again"));
  }
  if (report.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step must be >= 0, got ", report.step()));
  }
  Worker& w = *found;
  const absl::Time now = clock_->Now();
  v1::ReportStepResponse r;
  r.set_current_plan_version(job->record.current_version);
  if (!report.run_id().empty() && report.run_id() == w.report_run_id &&
      report.seq() <= w.report_seq) {
    return r;  // stored already; the worker did not see the answer
  }
  if (w.record.state == v1::WORKER_LOST) {
    WorkerRecord back = w.record;
    back.state = v1::WORKER_ACTIVE;
    back.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
    PIPEPLAN_RETURN_IF_ERROR(UpdateWorkerLocked(w, std::move(back)));
    UpdateGaugesLocked();
  }
  if (job->record.state == v1::JOB_PENDING) {
    PIPEPLAN_RETURN_IF_ERROR(
        SetJobStateInStore(job->record.id, v1::JOB_RUNNING, job->record.failure_message));
    job->record.state = v1::JOB_RUNNING;
    LogInfo("job_state", {{"job", job->record.id}, {"state", "JOB_RUNNING"}});
  }
  if (ownership_) return AppendReportUnlocked(report, w, std::move(r));
  PIPEPLAN_RETURN_IF_ERROR(store_->AppendStepReport(report));
  w.lease_expiry = now + options_.lease;
  w.record.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  w.record.last_step = std::max(w.record.last_step, report.step());
  w.report_run_id = report.run_id();
  w.report_seq = report.seq();
  return r;
}

absl::StatusOr<v1::ReportStepResponse> JobRegistry::AppendReportUnlocked(
    const v1::ReportStepRequest& report, Worker& w, v1::ReportStepResponse r) {
  // Replicated: PostgreSQL takes concurrent inserts, so the report is
  // stored without the registry's lock (one lock per replica would
  // otherwise bound its reports/s by one round trip each). A worker sends
  // one report at a time; one that resends while the first is still being
  // stored is asked to retry, so the duplicate check above stays exact.
  if (w.report_in_flight) {
    return absl::UnavailableError(
        absl::StrCat("a report of worker ", report.worker_id(), " is being stored; retry"));
  }
  w.report_in_flight = true;
  mu_.Unlock();
  const absl::Status stored = store_->AppendStepReport(report);
  mu_.Lock();
  // The job or worker may be gone meanwhile (deleted here or elsewhere).
  Job* job = FindLocked(report.job_id());
  if (job == nullptr) return stored.ok() ? absl::StatusOr<v1::ReportStepResponse>(r) : stored;
  auto it = job->workers.find(report.worker_id());
  if (it == job->workers.end()) {
    return stored.ok() ? absl::StatusOr<v1::ReportStepResponse>(r) : stored;
  }
  Worker& again = it->second;
  again.report_in_flight = false;
  PIPEPLAN_RETURN_IF_ERROR(stored);
  const absl::Time now = clock_->Now();
  again.lease_expiry = now + options_.lease;
  again.record.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  again.record.last_step = std::max(again.record.last_step, report.step());
  if (report.run_id() != again.report_run_id) again.report_seq = 0;
  again.report_run_id = report.run_id();
  again.report_seq = std::max(again.report_seq, report.seq());
  StoreHeartbeatLocked(again, now);
  return r;
}

absl::StatusOr<v1::Job> JobRegistry::FinishWorker(const v1::FinishWorkerRequest& request) {
  if (request.error().size() > 4096) {
    return absl::InvalidArgumentError("error is longer than 4096 bytes");
  }
  if (request.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step is negative: ", request.step()));
  }
  absl::MutexLock l(&mu_);
  Job* job = FindOrLoadLocked(request.job_id());
  if (!job) return JobNotFound(request.job_id());
  if (ownership_) {
    // Other workers may have finished through other replicas.
    if (absl::StatusOr<StoredJob> stored = store_->LoadJob(request.job_id()); stored.ok()) {
      for (WorkerRecord& w : stored->workers) {
        auto at = job->workers.find(w.info.worker_id());
        if (at == job->workers.end()) {
          job->workers[w.info.worker_id()] = Worker{std::move(w), clock_->Now() + options_.lease};
        } else {
          at->second.record.state = w.state;
        }
      }
    }
  }
  auto it = job->workers.find(request.worker_id());
  if (it == job->workers.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker \"", request.worker_id(), "\" is not registered with job ", request.job_id()));
  }
  // A worker leaving a job that goes on is LEFT: never lost, and the policy
  // replans over the live workers at once.
  const bool leaving =
      request.leaving() && request.error().empty() &&
      (job->record.state == v1::JOB_RUNNING || job->record.state == v1::JOB_PENDING);
  // The version whose ranks must all be done for the job to complete: the
  // one this worker trained to the end on, which may be older than the
  // current one (a version published as training reached max_steps never
  // ran).
  std::shared_ptr<const v1::VersionedPlan> trained = job->current;
  if (request.plan_version() > 0 && request.plan_version() < job->record.current_version) {
    absl::StatusOr<v1::VersionedPlan> older =
        store_->GetPlan(job->record.id, request.plan_version());
    if (older.ok()) trained = std::make_shared<const v1::VersionedPlan>(*std::move(older));
  }
  WorkerRecord rec = it->second.record;
  rec.state = leaving ? v1::WORKER_LEFT : v1::WORKER_DONE;
  rec.last_step = std::max(rec.last_step, request.step() - 1);
  PIPEPLAN_RETURN_IF_ERROR(store_->PutWorker(rec));
  it->second.record = rec;
  v1::JobState next = job->record.state;
  std::string message = job->record.failure_message;
  if (next == v1::JOB_CANCELLED) {
    // Stays cancelled: a worker stopping because of it is not a failure.
  } else if (!request.error().empty() && next != v1::JOB_FAILED) {
    next = v1::JOB_FAILED;
    message = absl::StrCat("worker ", request.worker_id(), " at step ", request.step(), ": ",
                           request.error());
  } else if (request.error().empty() && !leaving &&
             (next == v1::JOB_RUNNING || next == v1::JOB_PENDING) &&
             AllRanksDoneLocked(*job, trained->plan())) {
    next = v1::JOB_COMPLETED;
  }
  if (leaving) {
    LogInfo("worker_left", {{"job", job->record.id},
                            {"plan_version", absl::StrCat(job->record.current_version)},
                            {"worker", request.worker_id()},
                            {"step", absl::StrCat(request.step())}});
  }
  if (next != job->record.state) {
    PIPEPLAN_RETURN_IF_ERROR(SetJobStateInStore(job->record.id, next, message));
    job->record.state = next;
    job->record.failure_message = message;
    LogInfo("job_state",
            {{"job", job->record.id}, {"state", v1::JobState_Name(next)}, {"message", message}});
  }
  UpdateGaugesLocked();
  return ToProtoLocked(*job, /*with_plan=*/false);
}

bool JobRegistry::AllRanksDoneLocked(const Job& job, const v1::Plan& plan) const {
  int done = 0;
  for (const auto& [id, w] : job.workers) {
    if (RankOfDevice(plan, w.record.info.device_id()) < 0) continue;
    if (w.record.state != v1::WORKER_DONE) return false;
    ++done;
  }
  return done > 0;
}

absl::StatusOr<std::vector<v1::ReportStepRequest>> JobRegistry::RecentStepReports(
    const std::string& job_id, int limit, int64_t max_bytes) const {
  {
    absl::ReaderMutexLock l(&mu_);
    if (!FindLocked(job_id)) return JobNotFound(job_id);
  }
  return store_->RecentStepReports(job_id, limit, max_bytes);
}

absl::Status JobRegistry::RendezvousSet(const std::string& job_id, const std::string& key,
                                        const std::string& value) {
  if (key.empty() || key.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key must be 1 to ", kMaxIdBytes, " bytes, got ", key.size()));
  }
  const int64_t value_bytes = static_cast<int64_t>(value.size());
  if (value_bytes > options_.rendezvous_max_value_bytes) {
    return OverLimit(absl::StrCat("rendezvous value \"", key, "\" has ", value_bytes, " bytes"),
                     "rendezvous-max-value-bytes", options_.rendezvous_max_value_bytes);
  }
  absl::MutexLock l(&mu_);
  Job* job = FindOrLoadLocked(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  auto it = job->rendezvous.find(key);
  const bool is_new = it == job->rendezvous.end();
  const int64_t key_bytes = static_cast<int64_t>(key.size());
  const int64_t delta =
      value_bytes - (is_new ? -key_bytes : static_cast<int64_t>(it->second.size()));
  if (is_new &&
      static_cast<int64_t>(job->rendezvous.size()) >= options_.rendezvous_max_keys_per_job) {
    return OverLimit(
        absl::StrCat("job ", job_id, " has ", job->rendezvous.size(), " rendezvous keys"),
        "rendezvous-max-keys-per-job", options_.rendezvous_max_keys_per_job);
  }
  if (job->rendezvous_bytes + delta > options_.rendezvous_max_bytes_per_job) {
    return OverLimit(absl::StrCat("job ", job_id, " would hold ", job->rendezvous_bytes + delta,
                                  " bytes of rendezvous keys and values"),
                     "rendezvous-max-bytes-per-job", options_.rendezvous_max_bytes_per_job);
  }
  if (rendezvous_bytes_ + delta > options_.rendezvous_max_bytes) {
    return OverLimit(absl::StrCat("the planner would hold ", rendezvous_bytes_ + delta,
                                  " bytes of rendezvous keys and values (all jobs)"),
                     "rendezvous-max-bytes", options_.rendezvous_max_bytes);
  }
  if (ownership_) {
    // Shared: workers of the job on other replicas read it from the store.
    PIPEPLAN_RETURN_IF_ERROR(store_->RendezvousPut(job_id, key, value, KeyVersion(key)));
  }
  // A fresh string, so a shorter value does not keep a longer one's buffer.
  if (is_new) {
    job->rendezvous.emplace(key, value);
  } else {
    it->second = std::string(value);
  }
  job->rendezvous_bytes += delta;
  rendezvous_bytes_ += delta;
  return absl::OkStatus();
}

void JobRegistry::DropRendezvousBeforeLocked(Job& job, int64_t oldest_kept) {
  // The bytes are summed in the lambda and charged here, where the lock
  // analysis sees mu_ held.
  int64_t freed = 0;
  absl::erase_if(job.rendezvous, [&](const auto& kv) {
    const std::string& key = kv.first;
    const int64_t version = KeyVersion(key);
    if (version < 0 || version >= oldest_kept) return false;
    freed += static_cast<int64_t>(key.size() + kv.second.size());
    return true;
  });
  job.rendezvous_bytes -= freed;
  rendezvous_bytes_ -= freed;
}

absl::StatusOr<v1::RendezvousGetResponse> JobRegistry::RendezvousGet(const std::string& job_id,
                                                                     const std::string& key) const {
  absl::ReaderMutexLock l(&mu_);
  const Job* job = FindLocked(job_id);
  if (!job && ownership_ && store_->GetPlan(job_id, 1).ok()) {
    // Replicated: a job this replica has not synced yet.
    PIPEPLAN_ASSIGN_OR_RETURN(std::optional<std::string> stored,
                              store_->RendezvousFetch(job_id, key));
    v1::RendezvousGetResponse r;
    r.set_found(stored.has_value());
    if (stored) r.set_value(*std::move(stored));
    return r;
  }
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  v1::RendezvousGetResponse r;
  if (auto it = job->rendezvous.find(key); it != job->rendezvous.end()) {
    r.set_found(true);
    r.set_value(it->second);
  } else if (ownership_) {
    // Set through another replica.
    PIPEPLAN_ASSIGN_OR_RETURN(std::optional<std::string> stored,
                              store_->RendezvousFetch(job_id, key));
    if (stored) {
      r.set_found(true);
      r.set_value(*std::move(stored));
    }
  }
  return r;
}

int JobRegistry::CheckLeases() {
  absl::MutexLock l(&mu_);
  const absl::Time now = clock_->Now();
  int lost = 0;
  for (auto& [id, job] : jobs_) {
    // Replicated: only the job's owner declares its workers lost, and only
    // after reading the heartbeats other replicas wrote.
    if (!Owns(id)) continue;
    for (auto& [wid, w] : job.workers) {
      if (w.record.state == v1::WORKER_ACTIVE && now >= w.lease_expiry &&
          !HeartbeatElsewhereLocked(w, now)) {
        WorkerRecord gone = w.record;
        gone.state = v1::WORKER_LOST;
        if (absl::Status saved = UpdateWorkerLocked(w, std::move(gone)); !saved.ok()) {
          // Still expired: the next check tries again.
          LogWarn("worker_lost_not_saved",
                  {{"job", id}, {"worker", wid}, {"error", std::string(saved.message())}});
          continue;
        }
        ++lost;
        LogWarn("worker_lost",
                {{"job", id},
                 {"plan_version", absl::StrCat(job.record.current_version)},
                 {"worker", wid},
                 {"lease_seconds", absl::StrCat(absl::ToDoubleSeconds(options_.lease))}});
      }
    }
  }
  if (lost > 0) UpdateGaugesLocked();
  return lost;
}

absl::Status JobRegistry::Watch(const std::string& job_id, const std::string& worker_id,
                                int64_t known_version, std::weak_ptr<PlanWatcher> watcher) {
  if (worker_id.size() > kMaxIdBytes) return absl::InvalidArgumentError("worker_id is too long");
  absl::MutexLock l(&mu_);
  Job* job = FindOrLoadLocked(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  FindWorkerLocked(*job, worker_id);  // its rank, when it registered elsewhere
  auto w = watcher.lock();
  if (!w) return absl::CancelledError("watcher gone");
  // Drop watches whose stream ended.
  job->watches.erase(std::remove_if(job->watches.begin(), job->watches.end(),
                                    [](const WatchEntry& x) { return x.watcher.expired(); }),
                     job->watches.end());
  job->watches.push_back({std::string(worker_id), watcher});
  if (job->record.current_version > known_version) w->OnPlan(UpdateFor(*job, worker_id));
  LogInfo("watch_started", {{"job", job->record.id},
                            {"plan_version", absl::StrCat(job->record.current_version)},
                            {"worker", std::string(worker_id)}});
  return absl::OkStatus();
}

void JobRegistry::CloseAllWatchers(const absl::Status& status) {
  absl::MutexLock l(&mu_);
  for (auto& [id, job] : jobs_) {
    for (WatchEntry& w : job.watches) {
      if (auto watcher = w.watcher.lock()) watcher->OnClose(status);
    }
    job.watches.clear();
  }
}

JobRegistry::Counts JobRegistry::counts() const {
  absl::ReaderMutexLock l(&mu_);
  Counts c;
  c.jobs = static_cast<int>(jobs_.size());
  for (const auto& [id, job] : jobs_) {
    for (const auto& [wid, w] : job.workers) {
      (w.record.state == v1::WORKER_LOST ? c.lost_workers : c.active_workers)++;
    }
    for (const WatchEntry& w : job.watches) c.watchers += w.watcher.expired() ? 0 : 1;
  }
  c.rendezvous_bytes = rendezvous_bytes_;
  return c;
}

}  // namespace pipeplan::server
