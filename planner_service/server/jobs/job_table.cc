#include "job_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeplan/server/obs/metrics.h"

namespace pipeplan::server::internal {
namespace {

// Step reports read per job when a stored job is loaded, at most.
constexpr int64_t kRecoverReportBytes = int64_t{64} << 20;

}  // namespace

Job* JobTable::Find(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const Job* JobTable::Find(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Job& JobTable::Insert(Job job) {
  const std::string id = job.record.id;
  return jobs_.insert_or_assign(id, std::move(job)).first->second;
}

Job JobFromStored(const RegistryContext& ctx, StoredJob sj, absl::Time now) {
  Job job;
  job.record = sj.job;
  job.current = std::make_shared<const v1::VersionedPlan>(std::move(sj.current));
  // Workers' last steps and last report numbers come from the stored
  // reports (not rewritten per report; newest first): the newest ones,
  // bounded in bytes, cover every live worker.
  absl::flat_hash_map<std::string, int64_t> last_step;
  absl::flat_hash_map<std::string, std::pair<std::string, int64_t>> last_seq;
  if (auto reports = ctx.store->RecentStepReports(sj.job.id, 100'000, kRecoverReportBytes);
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
    Worker& worker = job.workers[id] = Worker{std::move(w), now + 2 * ctx.options.lease};
    if (auto it = last_seq.find(id); it != last_seq.end()) {
      worker.report_run_id = it->second.first;
      worker.report_seq = it->second.second;
    }
  }
  return job;
}

void JobTable::UpdateGauges() const {
  if (!ctx_->metrics) return;
  int active = 0, lost = 0;
  for (const auto& [id, job] : jobs_) {
    for (const auto& [wid, w] : job.workers) {
      if (w.record.state == v1::WORKER_LOST) ++lost;
      if (w.record.state == v1::WORKER_ACTIVE) ++active;
    }
  }
  ctx_->metrics->SetJobs(static_cast<int>(jobs_.size()));
  ctx_->metrics->SetWorkers(active, lost);
}

v1::Job JobToProto(const Job& job, bool with_plan) {
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

void CloseWatches(Job& job, const absl::Status& status) {
  for (WatchEntry& w : job.watches) {
    if (auto watcher = w.watcher.lock()) watcher->OnClose(status);
  }
  job.watches.clear();
}

absl::Status StoreJobState(const RegistryContext& ctx, const std::string& job_id,
                           v1::JobState state, const std::string& message) {
  if (ctx.ownership) {
    if (std::optional<JobLease> lease = ctx.ownership->Lease(job_id)) {
      absl::Status s = ctx.store->SetJobStateFenced(job_id, state, message, *lease);
      if (s.code() == absl::StatusCode::kFailedPrecondition) ctx.ownership->Drop(job_id);
      return s;
    }
  }
  // Not the owner: a state a worker or an operator reports (running, done,
  // failed, cancelled) is a fact, written as such.
  return ctx.store->SetJobState(job_id, state, message);
}

absl::Status JobNotFound(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" not found"));
}

absl::Status JobCancelled(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" was cancelled"));
}

absl::Status JobDeleted(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job \"", job_id, "\" was deleted"));
}

absl::Status CheckId(const std::string& field, const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is required"));
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is longer than ", kMaxIdBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status OverLimit(absl::string_view what, absl::string_view flag, int64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(what, ", over the limit --", flag, "=", limit));
}

}  // namespace pipeplan::server::internal
