#include "pipeplan/server/write_health_store.h"

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
