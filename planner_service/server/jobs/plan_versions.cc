#include "plan_versions.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/obs/metrics.h"

namespace pipeplan::server::internal {
namespace {

// What a watcher of `worker_id` receives: the plan and its rank in it.
std::shared_ptr<const v1::PlanUpdate> UpdateFor(const Job& job, const std::string& worker_id) {
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

}  // namespace

absl::StatusOr<v1::VersionedPlan> PlanVersions::Next(const Job& job, const v1::PlanRequest& request,
                                                     const v1::Plan& plan,
                                                     const std::string& reason,
                                                     int64_t expected_version) const {
  const std::string& job_id = job.record.id;
  if (job.record.state == v1::JOB_CANCELLED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " was cancelled; it gets no new plan versions"));
  }
  if (expected_version > 0 && job.record.current_version != expected_version) {
    return absl::AbortedError(absl::StrCat("job ", job_id, " is at plan version ",
                                           job.record.current_version, ", not ", expected_version));
  }
  v1::VersionedPlan next;
  next.set_job_id(job_id);
  next.set_version(job.record.current_version + 1);
  *next.mutable_plan() = plan;
  *next.mutable_request() = request;
  next.set_reason(reason);
  return next;
}

absl::Status PlanVersions::Store(const v1::VersionedPlan& plan, PublishAs as) const {
  JobOwnership* ownership = ctx_->ownership;
  if (!ownership) return ctx_->store->AppendPlan(plan);
  std::optional<JobLease> lease = ownership->Lease(plan.job_id());
  if (!lease && as == PublishAs::kOwner) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", plan.job_id(), " is owned by another planner; only its owner replans it"));
  }
  if (!lease) {
    // An operator's replan here takes the job over: the next token fences
    // the previous owner out.
    PIPEPLAN_ASSIGN_OR_RETURN(JobLease taken, ownership->Claim(plan.job_id(), /*force=*/true));
    lease = taken;
  }
  absl::Status s = ctx_->store->AppendPlanFenced(plan, *lease);
  if (s.code() == absl::StatusCode::kFailedPrecondition) ownership->Drop(plan.job_id());
  if (s.ok()) {
    // Best effort, as in memory: the keys of versions before the previous.
    (void)ctx_->store->RendezvousTrim(plan.job_id(), plan.version() - 1);
  }
  return s;
}

void PlanVersions::Apply(Job& job, std::shared_ptr<const v1::VersionedPlan> plan) const {
  job.record.current_version = plan->version();
  job.current = std::move(plan);
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
  if (ctx_->metrics) {
    ctx_->metrics->SetPlan(job.record.id, job.record.current_version,
                           job.current->plan().step_seconds(), job.current->plan().bubble_ratio());
  }
  LogInfo("plan_published", {{"job", job.record.id},
                             {"plan_version", absl::StrCat(job.record.current_version)},
                             {"reason", job.current->reason()},
                             {"watchers", absl::StrCat(job.watches.size())}});
}

absl::Status PlanVersions::Watch(Job& job, const std::string& worker_id, int64_t known_version,
                                 const std::weak_ptr<PlanWatcher>& watcher) const {
  auto w = watcher.lock();
  if (!w) return absl::CancelledError("watcher gone");
  // Drop watches whose stream ended.
  std::erase_if(job.watches, [](const WatchEntry& x) { return x.watcher.expired(); });
  job.watches.push_back({worker_id, watcher});
  if (auto it = job.workers.find(worker_id); it != job.workers.end()) {
    it->second.watched = true;
    it->second.watch_gone_since = absl::InfiniteFuture();
  }
  if (job.record.current_version > known_version) w->OnPlan(UpdateFor(job, worker_id));
  LogInfo("watch_started", {{"job", job.record.id},
                            {"plan_version", absl::StrCat(job.record.current_version)},
                            {"worker", worker_id}});
  return absl::OkStatus();
}

void PlanVersions::SetContingencies(Job& job, std::vector<v1::ContingencyPlan> plans) const {
  job.contingency_version = job.record.current_version;
  // Clock-based, so a restarted planner or another replica does not hand
  // out a number a worker already holds for other plans.
  job.contingency_generation =
      std::max(absl::ToUnixMicros(ctx_->clock->Now()), job.contingency_generation + 1);
  job.contingencies = std::make_shared<const std::vector<v1::ContingencyPlan>>(std::move(plans));
}

void PlanVersions::AddContingencies(const Job& job, int64_t known_generation,
                                    v1::VersionedPlan& out) const {
  if (!job.contingencies || job.contingency_version != out.version()) return;
  out.set_contingency_generation(job.contingency_generation);
  if (known_generation == job.contingency_generation) return;
  for (const v1::ContingencyPlan& c : *job.contingencies) *out.add_contingencies() = c;
}

}  // namespace pipeplan::server::internal
