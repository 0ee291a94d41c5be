#include "pipeplan/server/jobs/job_ownership.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/server/obs/log.h"

namespace pipeplan::server {

JobOwnership::JobOwnership(Store* store, Options options)
    : store_(store), options_(std::move(options)) {}

std::optional<JobLease> JobOwnership::Lease(const std::string& job_id) const {
  absl::MutexLock l(&mu_);
  auto it = leases_.find(job_id);
  if (it == leases_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<JobLease> JobOwnership::Claim(const std::string& job_id, bool force) {
  absl::StatusOr<JobLease> lease =
      store_->ClaimJob(job_id, options_.replica_id, options_.address, options_.lease, force);
  if (!lease.ok()) return lease.status();
  absl::MutexLock l(&mu_);
  const bool fresh = !leases_.contains(job_id);
  leases_[job_id] = *lease;
  if (fresh) {
    LogInfo("job_owned", {{"job", job_id},
                          {"owner", options_.replica_id},
                          {"fencing_token", absl::StrCat(lease->token)},
                          {"forced", force ? "true" : "false"}});
  }
  return lease;
}

void JobOwnership::Drop(const std::string& job_id) {
  absl::MutexLock l(&mu_);
  if (leases_.erase(job_id) > 0) {
    LogWarn("job_ownership_lost", {{"job", job_id}, {"owner", options_.replica_id}});
  }
}

std::vector<std::string> JobOwnership::Tick(const std::vector<JobHead>& heads) {
  const absl::Time now = absl::Now();
  bool renew = false;
  {
    absl::MutexLock l(&mu_);
    renew = now - last_renewal_ >= options_.lease / 3;
  }
  if (renew) {
    // The store's answer is the truth: a lease another planner took is not
    // in it, so it leaves this planner's map here at the latest.
    absl::StatusOr<std::vector<JobLease>> held =
        store_->RenewJobLeases(options_.replica_id, options_.lease);
    if (held.ok()) {
      absl::MutexLock l(&mu_);
      absl::flat_hash_map<std::string, JobLease> next;
      for (JobLease& lease : *held) next[lease.job_id] = std::move(lease);
      for (const auto& [id, lease] : leases_) {
        if (!next.contains(id)) {
          LogWarn("job_ownership_lost", {{"job", id}, {"owner", options_.replica_id}});
        }
      }
      leases_ = std::move(next);
      last_renewal_ = now;
    } else {
      // Not renewed: the leases run out unless a later try succeeds; the
      // fenced writes keep every write safe meanwhile.
      LogWarn("job_leases_not_renewed", {{"error", std::string(held.status().message())}});
    }
  }
  std::vector<std::string> claimed;
  for (const JobHead& head : heads) {
    if (!head.owner.empty()) continue;
    if (head.state != v1::JOB_PENDING && head.state != v1::JOB_RUNNING) continue;
    if (Claim(head.id, /*force=*/false).ok()) claimed.push_back(head.id);
  }
  return claimed;
}

int JobOwnership::owned() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(leases_.size());
}

std::string NewReplicaId() {
  std::random_device rd;
  const uint64_t bits = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return absl::StrFormat("planner-%016x", bits);
}

}  // namespace pipeplan::server
