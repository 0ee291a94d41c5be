#include "pipeplan/server/jobs/job_registry.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/server/base/release_memory.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/obs/metrics.h"
#include "registry_state.h"

namespace pipeplan::server {
namespace {

using internal::Job;
using internal::JobCancelled;
using internal::JobNotFound;
using internal::RegistryState;
using internal::Worker;

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

// A new job's record and first plan version.
Job NewJob(const std::string& id, const std::string& name, const v1::PlanRequest& request,
           const v1::Plan& plan, const v1::TrainingSpec& training, absl::Time now) {
  Job job;
  job.record.id = id;
  job.record.name = name;
  job.record.create_time_unix_ms = absl::ToUnixMillis(now);
  job.record.current_version = 1;
  job.record.training = training;
  job.record.state = v1::JOB_PENDING;
  v1::VersionedPlan first;
  first.set_job_id(id);
  first.set_version(1);
  *first.mutable_plan() = plan;
  *first.mutable_request() = request;
  first.set_reason("created");
  job.current = std::make_shared<const v1::VersionedPlan>(std::move(first));
  return job;
}

}  // namespace

JobRegistry::JobRegistry(Store* store, const Clock* clock, Options options, Metrics* metrics)
    : ctx_(std::make_unique<internal::RegistryContext>(
          internal::RegistryContext{store, clock, options, metrics})),
      state_(std::make_unique<RegistryState>(ctx_.get())) {}

JobRegistry::~JobRegistry() = default;

bool JobRegistry::replicated() const { return ctx_->replicated(); }

absl::Duration JobRegistry::lease() const { return ctx_->options.lease; }

absl::Status JobRegistry::Recover() {
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<StoredJob> stored, ctx_->store->Load());
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  const absl::Time now = ctx_->clock->Now();
  for (StoredJob& sj : stored) {
    Job job = internal::JobFromStored(*ctx_, std::move(sj), now);
    job.synced = ctx_->replicated();
    if (ctx_->metrics) {
      ctx_->metrics->SetPlan(job.record.id, job.record.current_version,
                             job.current->plan().step_seconds(),
                             job.current->plan().bubble_ratio());
    }
    LogInfo("job_recovered", {{"job", job.record.id},
                              {"plan_version", absl::StrCat(job.record.current_version)},
                              {"workers", absl::StrCat(job.workers.size())}});
    s.table.Insert(std::move(job));
  }
  s.table.UpdateGauges();
  return absl::OkStatus();
}

void JobRegistry::EnableReplication(JobOwnership* ownership) { ctx_->ownership = ownership; }

bool JobRegistry::Owns(const std::string& job_id) const {
  return ctx_->ownership == nullptr || ctx_->ownership->Lease(job_id).has_value();
}

absl::StatusOr<v1::Job> JobRegistry::CreateJob(const std::string& name,
                                               const v1::PlanRequest& request, const v1::Plan& plan,
                                               const v1::TrainingSpec& training) {
  if (name.size() > internal::kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("name is longer than ", internal::kMaxIdBytes, " bytes"));
  }
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  if (s.table.size() >= ctx_->options.max_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the planner holds the maximum of ", ctx_->options.max_jobs, " jobs"));
  }
  std::string id;
  do {
    id = NewJobId();
  } while (s.table.contains(id));
  Job job = NewJob(id, name, request, plan, training, ctx_->clock->Now());
  PIPEPLAN_RETURN_IF_ERROR(ctx_->store->CreateJob(job.record, *job.current));
  if (ctx_->ownership) {
    // Its creator owns it first; a failed claim leaves it to the next
    // replica's sync, which claims jobs without a live owner.
    job.synced = true;
    if (auto claimed = ctx_->ownership->Claim(id, /*force=*/false); !claimed.ok()) {
      LogWarn("job_not_claimed", {{"job", id}, {"error", std::string(claimed.status().message())}});
    }
  }
  const Job& created = s.table.Insert(std::move(job));
  if (ctx_->metrics) {
    ctx_->metrics->SetPlan(id, 1, created.current->plan().step_seconds(),
                           created.current->plan().bubble_ratio());
  }
  s.table.UpdateGauges();
  LogInfo("job_created", {{"job", id}, {"name", name}, {"plan_version", "1"}});
  return internal::JobToProto(created, /*with_plan=*/true);
}

absl::StatusOr<v1::Job> JobRegistry::GetJob(const std::string& job_id) const {
  {
    absl::ReaderMutexLock l(&mu_);
    if (const Job* job = state_->table.Find(job_id)) {
      return internal::JobToProto(*job, /*with_plan=*/true);
    }
    if (!ctx_->replicated()) return JobNotFound(job_id);
  }
  // Replicated: a job another replica created since this one's last sync.
  absl::StatusOr<StoredJob> stored = ctx_->store->LoadJob(job_id);
  if (stored.status().code() == absl::StatusCode::kNotFound) return JobNotFound(job_id);
  if (!stored.ok()) return stored.status();
  return internal::JobToProto(
      internal::JobFromStored(*ctx_, *std::move(stored), ctx_->clock->Now()), /*with_plan=*/true);
}

std::vector<v1::Job> JobRegistry::ListJobs() const {
  absl::ReaderMutexLock l(&mu_);
  std::vector<v1::Job> out;
  for (const auto& [id, job] : state_->table.jobs()) {
    out.push_back(internal::JobToProto(job, /*with_plan=*/false));
  }
  std::sort(out.begin(), out.end(), [](const v1::Job& a, const v1::Job& b) {
    return a.create_time_unix_ms() != b.create_time_unix_ms()
               ? a.create_time_unix_ms() < b.create_time_unix_ms()
               : a.id() < b.id();
  });
  return out;
}

int64_t JobRegistry::RemoveJobLocked(RegistryState& s, const std::string& job_id) {
  Job& job = *s.table.Find(job_id);
  internal::CloseWatches(job, internal::JobDeleted(job_id));
  const int64_t freed = s.rendezvous.Clear(job);
  if (ctx_->metrics) ctx_->metrics->RemoveJob(job_id);
  s.table.Erase(job_id);
  return freed;
}

absl::Status JobRegistry::DeleteJob(const std::string& job_id) {
  int64_t freed = 0;
  {
    absl::MutexLock l(&mu_);
    RegistryState& s = *state_;
    if (!s.table.Find(job_id)) return JobNotFound(job_id);
    PIPEPLAN_RETURN_IF_ERROR(ctx_->store->DeleteJob(job_id));
    freed = RemoveJobLocked(s, job_id);
    LogInfo("job_deleted", {{"job", job_id}, {"rendezvous_bytes", absl::StrCat(freed)}});
    s.table.UpdateGauges();
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
  RegistryState& s = *state_;
  Job* job = s.table.Find(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return internal::JobToProto(*job, true);
  if (job->record.state != v1::JOB_RUNNING && job->record.state != v1::JOB_PENDING) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " already ended (",
                                                      v1::JobState_Name(job->record.state),
                                                      "); nothing to cancel"));
  }
  const std::string message = reason.empty() ? "cancelled" : absl::StrCat("cancelled: ", reason);
  PIPEPLAN_RETURN_IF_ERROR(internal::StoreJobState(*ctx_, job_id, v1::JOB_CANCELLED, message));
  job->record.state = v1::JOB_CANCELLED;
  job->record.failure_message = message;
  // Workers learn it as they would a deletion: their stream ends NOT_FOUND.
  internal::CloseWatches(*job, JobCancelled(job_id));
  // Nothing rendezvous through a cancelled job again (RendezvousSet refuses).
  *freed = s.rendezvous.Clear(*job);
  s.table.UpdateGauges();
  LogInfo("job_state", {{"job", job_id}, {"state", "JOB_CANCELLED"}, {"message", message}});
  return internal::JobToProto(*job, /*with_plan=*/true);
}

absl::StatusOr<v1::VersionedPlan> JobRegistry::GetPlan(const std::string& job_id,
                                                       int64_t version) const {
  Store* store = ctx_->store;
  const bool replicated = ctx_->replicated();
  {
    absl::ReaderMutexLock l(&mu_);
    const Job* job = state_->table.Find(job_id);
    if (!job && replicated && version > 0) return store->GetPlan(job_id, version);
    if (!job && replicated) {
      absl::StatusOr<StoredJob> stored = store->LoadJob(job_id);
      if (stored.ok()) return std::move(stored->current);
    }
    if (!job) return JobNotFound(job_id);
    if (version < 0) {
      return absl::InvalidArgumentError(absl::StrCat("version must be >= 0, got ", version));
    }
    if (version == 0 || version == job->record.current_version) {
      v1::VersionedPlan out = *job->current;
      state_->plans.AddContingencies(*job, /*known_generation=*/0, out);
      return out;
    }
    if (version > job->record.current_version && !replicated) {
      return absl::NotFoundError(absl::StrCat("job ", job_id, " has no plan version ", version,
                                              " (current is ", job->record.current_version, ")"));
    }
  }
  return store->GetPlan(job_id, version);
}

absl::StatusOr<v1::VersionedPlan> JobRegistry::GetContingencies(const std::string& job_id,
                                                                int64_t version,
                                                                int64_t known_generation) const {
  {
    absl::ReaderMutexLock l(&mu_);
    const Job* job = state_->table.Find(job_id);
    if (job && (version == 0 || version == job->record.current_version)) {
      v1::VersionedPlan out;
      out.set_job_id(job_id);
      out.set_version(job->record.current_version);
      state_->plans.AddContingencies(*job, known_generation, out);
      return out;
    }
  }
  // Another version, or a job this replica does not hold: no contingencies
  // here, only the errors GetPlan answers.
  PIPEPLAN_ASSIGN_OR_RETURN(const v1::VersionedPlan full, GetPlan(job_id, version));
  v1::VersionedPlan out;
  out.set_job_id(full.job_id());
  out.set_version(full.version());
  return out;
}

absl::Status JobRegistry::SetContingencies(const std::string& job_id, int64_t version,
                                           std::vector<v1::ContingencyPlan> plans) {
  absl::MutexLock l(&mu_);
  Job* job = state_->table.Find(job_id);
  if (!job) return JobNotFound(job_id);
  if (version != job->record.current_version) {
    return absl::AbortedError(absl::StrCat("job ", job_id, " is at plan version ",
                                           job->record.current_version, ", not ", version));
  }
  state_->plans.SetContingencies(*job, std::move(plans));
  return absl::OkStatus();
}

void JobRegistry::ApplyPlanLocked(RegistryState& s, Job& job,
                                  std::shared_ptr<const v1::VersionedPlan> plan) {
  // Workers switching from the previous version may still read its keys.
  s.rendezvous.DropBefore(job, plan->version() - 1);
  s.plans.Apply(job, std::move(plan));
}

absl::StatusOr<int64_t> JobRegistry::PublishPlan(const std::string& job_id,
                                                 const v1::PlanRequest& request,
                                                 const v1::Plan& plan, const std::string& reason,
                                                 int64_t expected_version, PublishAs as,
                                                 const v1::VersionPrediction* prediction) {
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  Job* job = s.sync.FindOrLoad(job_id);
  if (!job) return JobNotFound(job_id);
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan next,
                            s.plans.Next(*job, request, plan, reason, expected_version));
  if (prediction != nullptr) *next.mutable_prediction() = *prediction;
  PIPEPLAN_RETURN_IF_ERROR(s.plans.Store(next, as));
  ApplyPlanLocked(s, *job, std::make_shared<const v1::VersionedPlan>(std::move(next)));
  return job->record.current_version;
}

absl::Status JobRegistry::Watch(const std::string& job_id, const std::string& worker_id,
                                int64_t known_version, std::weak_ptr<PlanWatcher> watcher) {
  if (worker_id.size() > internal::kMaxIdBytes) {
    return absl::InvalidArgumentError("worker_id is too long");
  }
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  Job* job = s.sync.FindOrLoad(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  s.sync.FindWorker(*job, worker_id);  // its rank, when it registered elsewhere
  return s.plans.Watch(*job, worker_id, known_version, watcher);
}

void JobRegistry::CloseAllWatchers(const absl::Status& status) {
  absl::MutexLock l(&mu_);
  for (auto& [id, job] : state_->table.jobs()) internal::CloseWatches(job, status);
}

absl::StatusOr<v1::Assignment> JobRegistry::RegisterWorker(const std::string& job_id,
                                                           const v1::WorkerInfo& info) {
  PIPEPLAN_RETURN_IF_ERROR(internal::WorkerLeases::CheckInfo(info));
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  Job* job = s.sync.FindOrLoad(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  return s.leases.Register(*job, info);
}

absl::StatusOr<v1::HeartbeatResponse> JobRegistry::Heartbeat(const std::string& job_id,
                                                             const std::string& worker_id) {
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  Job* job = s.sync.FindOrLoad(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  Worker* w = s.sync.FindWorker(*job, worker_id);
  if (w == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker \"", worker_id, "\" is not registered with job ", job_id, "; call RegisterWorker"));
  }
  return s.leases.Heartbeat(*job, *w);
}

absl::StatusOr<v1::HeartbeatResponse> JobRegistry::Heartbeat(const v1::HeartbeatRequest& request) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::HeartbeatResponse r,
                            Heartbeat(request.job_id(), request.worker_id()));
  if (request.failed_version() <= 0) return r;
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  Job* job = s.sync.FindOrLoad(request.job_id());
  Worker* w = job ? s.sync.FindWorker(*job, request.worker_id()) : nullptr;
  if (w == nullptr) return r;  // deleted meanwhile: the next call says so
  const std::vector<std::string> devices(request.unreachable_devices().begin(),
                                         request.unreachable_devices().end());
  s.leases.ReportPeerFailure(*job, *w, request.failed_version(), devices);
  return r;
}

int JobRegistry::CheckLeases() {
  absl::MutexLock l(&mu_);
  return state_->leases.CheckLeases();
}

absl::StatusOr<v1::Job> JobRegistry::FinishWorker(const v1::FinishWorkerRequest& request) {
  if (request.error().size() > 4096) {
    return absl::InvalidArgumentError("error is longer than 4096 bytes");
  }
  if (request.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step is negative: ", request.step()));
  }
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  Job* job = s.sync.FindOrLoad(request.job_id());
  if (!job) return JobNotFound(request.job_id());
  if (ctx_->replicated()) {
    // Other workers may have finished through other replicas.
    if (absl::StatusOr<StoredJob> stored = ctx_->store->LoadJob(request.job_id()); stored.ok()) {
      s.sync.MergeWorkers(*job, *stored);
    }
  }
  return s.leases.Finish(*job, request);
}

absl::StatusOr<v1::ReportStepResponse> JobRegistry::ReportStep(
    const v1::ReportStepRequest& report) {
  PIPEPLAN_RETURN_IF_ERROR(internal::StepReports::CheckSize(report, ctx_->options));
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  Job* job = s.sync.FindOrLoad(report.job_id());
  if (!job) return JobNotFound(report.job_id());
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(report.job_id());
  Worker* w = s.sync.FindWorker(*job, report.worker_id());
  if (w == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker \"", report.worker_id(), "\" is not registered with job ", report.job_id()));
  }
  if (ctx_->replicated() && report.plan_version() > job->record.current_version) {
    // Published by another replica since this one's last sync: catch up
    // rather than refuse a version that exists.
    if (absl::StatusOr<StoredJob> stored = ctx_->store->LoadJob(job->record.id); stored.ok()) {
      ApplyStoredLocked(s, *job, *std::move(stored));
    }
  }
  PIPEPLAN_ASSIGN_OR_RETURN(internal::StepReports::Admitted admitted,
                            s.reports.Admit(*job, *w, report));
  if (!admitted.store) return admitted.response;
  if (ctx_->replicated()) return StoreReportUnlocked(report, *w, std::move(admitted.response));
  PIPEPLAN_RETURN_IF_ERROR(ctx_->store->AppendStepReport(report));
  s.reports.Record(*w, report);
  return admitted.response;
}

absl::StatusOr<v1::ReportStepResponse> JobRegistry::StoreReportUnlocked(
    const v1::ReportStepRequest& report, Worker& w, v1::ReportStepResponse r) {
  // Replicated: PostgreSQL takes concurrent inserts, so the report is
  // stored without the registry's lock (one lock per replica would
  // otherwise bound its reports/s by one round trip each). A worker sends
  // one report at a time; one that resends while the first is still being
  // stored is asked to retry, so the duplicate check stays exact.
  if (w.report_in_flight) {
    return absl::UnavailableError(
        absl::StrCat("a report of worker ", report.worker_id(), " is being stored; retry"));
  }
  w.report_in_flight = true;
  mu_.Unlock();
  const absl::Status stored = ctx_->store->AppendStepReport(report);
  mu_.Lock();
  RegistryState& s = *state_;
  // The job or worker may be gone meanwhile (deleted here or elsewhere).
  Job* job = s.table.Find(report.job_id());
  Worker* again = nullptr;
  if (job != nullptr) {
    if (auto it = job->workers.find(report.worker_id()); it != job->workers.end()) {
      again = &it->second;
    }
  }
  if (again == nullptr) return stored.ok() ? absl::StatusOr<v1::ReportStepResponse>(r) : stored;
  again->report_in_flight = false;
  PIPEPLAN_RETURN_IF_ERROR(stored);
  s.reports.RecordShared(*again, report);
  s.sync.QueueHeartbeat(*again, ctx_->clock->Now());
  return r;
}

absl::StatusOr<std::vector<v1::ReportStepRequest>> JobRegistry::RecentStepReports(
    const std::string& job_id, int limit, int64_t max_bytes) const {
  {
    absl::ReaderMutexLock l(&mu_);
    if (!state_->table.Find(job_id)) return JobNotFound(job_id);
  }
  return ctx_->store->RecentStepReports(job_id, limit, max_bytes);
}

absl::StatusOr<double> JobRegistry::PlannedStepSeconds(const std::string& job_id) const {
  absl::ReaderMutexLock l(&mu_);
  const Job* job = state_->table.Find(job_id);
  if (!job) return JobNotFound(job_id);
  return job->current ? job->current->plan().step_seconds() : 0.0;
}

absl::Status JobRegistry::RendezvousSet(const std::string& job_id, const std::string& key,
                                        const std::string& value) {
  PIPEPLAN_RETURN_IF_ERROR(internal::RendezvousSpace::CheckEntry(key, value, ctx_->options));
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  Job* job = s.sync.FindOrLoad(job_id);
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  return s.rendezvous.Set(*job, key, value);
}

absl::StatusOr<v1::RendezvousGetResponse> JobRegistry::RendezvousGet(const std::string& job_id,
                                                                     const std::string& key) const {
  absl::ReaderMutexLock l(&mu_);
  const RegistryState& s = *state_;
  const Job* job = s.table.Find(job_id);
  if (!job && ctx_->replicated() && ctx_->store->GetPlan(job_id, 1).ok()) {
    // Replicated: a job this replica has not synced yet.
    return s.rendezvous.GetStored(job_id, key);
  }
  if (!job) return JobNotFound(job_id);
  if (job->record.state == v1::JOB_CANCELLED) return JobCancelled(job_id);
  return s.rendezvous.Get(*job, key);
}

absl::Status JobRegistry::SyncFromStore() {
  if (!ctx_->replicated()) return absl::OkStatus();
  internal::ReplicationSync::Due due;
  {
    absl::MutexLock l(&mu_);
    due = state_->sync.TakeDue(ctx_->clock->Now());
  }
  if (absl::Status touched = ctx_->store->TouchWorkers(due.heartbeats); !touched.ok()) {
    // Best effort: the owner sees older times; the workers' next
    // heartbeats are written with the next batch.
    LogWarn("heartbeats_not_stored", {{"error", std::string(touched.message())}});
  }
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<JobHead> heads, ctx_->store->JobHeads());
  ctx_->ownership->Tick(heads);
  absl::flat_hash_set<std::string> in_store;
  for (const JobHead& head : heads) {
    in_store.insert(head.id);
    SyncJob(head);
    if (due.workers && ctx_->ownership->Lease(head.id)) AdoptStoredWorkers(head.id);
  }
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  const std::vector<std::string> gone = s.sync.Gone(in_store);
  for (const std::string& id : gone) {
    RemoveJobLocked(s, id);
    LogInfo("job_deleted", {{"job", id}, {"by", "another planner"}});
  }
  if (!gone.empty()) s.table.UpdateGauges();
  return absl::OkStatus();
}

void JobRegistry::SyncJob(const JobHead& head) {
  {
    absl::MutexLock l(&mu_);
    RegistryState& s = *state_;
    Job* job = s.table.Find(head.id);
    if (job == nullptr) {
      s.sync.FindOrLoad(head.id);
      return;
    }
    if (!s.sync.ApplyHead(*job, head)) return;
  }
  // Another replica published: read the version (and the workers it
  // reranked) outside the lock, then apply it unless it was meanwhile.
  absl::StatusOr<StoredJob> stored = ctx_->store->LoadJob(head.id);
  if (!stored.ok()) return;
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  if (Job* job = s.table.Find(head.id)) ApplyStoredLocked(s, *job, *std::move(stored));
}

void JobRegistry::ApplyStoredLocked(RegistryState& s, Job& job, StoredJob stored) {
  if (stored.job.current_version <= job.record.current_version) return;
  s.sync.MergeWorkers(job, stored);
  ApplyPlanLocked(s, job, std::make_shared<const v1::VersionedPlan>(std::move(stored.current)));
  s.table.UpdateGauges();
}

void JobRegistry::AdoptStoredWorkers(const std::string& job_id) {
  if (!ctx_->replicated()) return;
  absl::StatusOr<StoredJob> stored = ctx_->store->LoadJob(job_id);
  if (!stored.ok()) return;
  absl::MutexLock l(&mu_);
  RegistryState& s = *state_;
  Job* job = s.table.Find(job_id);
  if (job != nullptr && s.sync.Adopt(*job, *stored)) s.table.UpdateGauges();
}

JobRegistry::Counts JobRegistry::counts() const {
  absl::ReaderMutexLock l(&mu_);
  Counts c;
  c.jobs = state_->table.size();
  for (const auto& [id, job] : state_->table.jobs()) {
    for (const auto& [wid, w] : job.workers) {
      (w.record.state == v1::WORKER_LOST ? c.lost_workers : c.active_workers)++;
    }
    for (const internal::WatchEntry& w : job.watches) c.watchers += w.watcher.expired() ? 0 : 1;
  }
  c.rendezvous_bytes = state_->rendezvous.bytes();
  return c;
}

}  // namespace pipeplan::server
