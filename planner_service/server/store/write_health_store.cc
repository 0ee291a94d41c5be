#include "pipeplan/server/store/write_health_store.h"

#include <atomic>
#include <utility>

namespace pipeplan::server {
namespace {

bool DiskFault(const absl::Status& s) {
  return s.code() == absl::StatusCode::kResourceExhausted ||
         s.code() == absl::StatusCode::kUnavailable;
}

class WriteHealthStore final : public Store {
 public:
  WriteHealthStore(std::unique_ptr<Store> store, std::function<void(bool)> on_change)
      : store_(std::move(store)), on_change_(std::move(on_change)) {}

  absl::Status CreateJob(const JobRecord& job, const v1::VersionedPlan& first) override {
    return Saw(store_->CreateJob(job, first));
  }
  absl::Status AppendPlan(const v1::VersionedPlan& plan) override {
    return Saw(store_->AppendPlan(plan));
  }
  absl::Status DeleteJob(const std::string& job_id) override {
    return Saw(store_->DeleteJob(job_id));
  }
  absl::Status SetJobState(const std::string& job_id, v1::JobState state,
                           const std::string& message) override {
    return Saw(store_->SetJobState(job_id, state, message));
  }
  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) override {
    return store_->GetPlan(job_id, version);
  }
  absl::Status PutWorker(const WorkerRecord& worker) override {
    return Saw(store_->PutWorker(worker));
  }
  absl::Status AppendStepReport(const v1::ReportStepRequest& report) override {
    return Saw(store_->AppendStepReport(report));
  }
  absl::StatusOr<std::vector<v1::ReportStepRequest>> RecentStepReports(const std::string& job_id,
                                                                       int limit,
                                                                       int64_t max_bytes) override {
    return store_->RecentStepReports(job_id, limit, max_bytes);
  }
  absl::StatusOr<std::vector<StoredJob>> Load() override { return store_->Load(); }

  bool shared() const override { return store_->shared(); }
  absl::StatusOr<std::vector<JobHead>> JobHeads() override { return store_->JobHeads(); }
  absl::StatusOr<StoredJob> LoadJob(const std::string& job_id) override {
    return store_->LoadJob(job_id);
  }
  absl::StatusOr<WorkerRecord> GetWorker(const std::string& job_id,
                                         const std::string& worker_id) override {
    return store_->GetWorker(job_id, worker_id);
  }
  absl::Status TouchWorkers(const std::vector<WorkerHeartbeat>& heartbeats) override {
    return Saw(store_->TouchWorkers(heartbeats));
  }
  absl::StatusOr<JobLease> ClaimJob(const std::string& job_id, const std::string& owner,
                                    const std::string& address, absl::Duration ttl,
                                    bool force) override {
    return store_->ClaimJob(job_id, owner, address, ttl, force);
  }
  absl::StatusOr<std::vector<JobLease>> RenewJobLeases(const std::string& owner,
                                                       absl::Duration ttl) override {
    return store_->RenewJobLeases(owner, ttl);
  }
  absl::Status AppendPlanFenced(const v1::VersionedPlan& plan, const JobLease& fence) override {
    return Saw(store_->AppendPlanFenced(plan, fence));
  }
  absl::Status SetJobStateFenced(const std::string& job_id, v1::JobState state,
                                 const std::string& message, const JobLease& fence) override {
    return Saw(store_->SetJobStateFenced(job_id, state, message, fence));
  }
  absl::Status RendezvousPut(const std::string& job_id, const std::string& key,
                             const std::string& value, int64_t version) override {
    return Saw(store_->RendezvousPut(job_id, key, value, version));
  }
  absl::StatusOr<std::optional<std::string>> RendezvousFetch(const std::string& job_id,
                                                             const std::string& key) override {
    return store_->RendezvousFetch(job_id, key);
  }
  absl::Status RendezvousTrim(const std::string& job_id, int64_t oldest_kept) override {
    return store_->RendezvousTrim(job_id, oldest_kept);
  }

 private:
  absl::Status Saw(absl::Status s) {
    bool writing;
    if (s.ok()) {
      writing = true;
    } else if (DiskFault(s)) {
      writing = false;
    } else {
      return s;
    }
    if (writing_.exchange(writing) != writing && on_change_) on_change_(writing);
    return s;
  }

  std::unique_ptr<Store> store_;
  std::function<void(bool)> on_change_;
  std::atomic<bool> writing_{true};
};

}  // namespace

std::unique_ptr<Store> WithWriteHealth(std::unique_ptr<Store> store,
                                       std::function<void(bool writing)> on_change) {
  return std::make_unique<WriteHealthStore>(std::move(store), std::move(on_change));
}

}  // namespace pipeplan::server
