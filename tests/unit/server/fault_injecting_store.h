// A Store for unit tests that fails its writes the way a sick disk does:
// inject(ENOSPC) makes every mutating call fail with what SqliteStore
// returns for a full disk (RESOURCE_EXHAUSTED), EIO and EROFS with
// UNAVAILABLE; inject(0) clears the fault. Reads always go through to the
// in-memory store underneath, and a failed write changes nothing.
#ifndef PIPEPLAN_TESTS_UNIT_SERVER_FAULT_INJECTING_STORE_H_
#define PIPEPLAN_TESTS_UNIT_SERVER_FAULT_INJECTING_STORE_H_

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/server/store/store.h"

namespace pipeplan::server::testing {

class FaultInjectingStore : public Store {
 public:
  void inject(int error) { errno_ = error; }
  int writes_refused() const { return refused_; }

  absl::Status CreateJob(const JobRecord& job, const v1::VersionedPlan& first) override {
    if (absl::Status f = Fault(); !f.ok()) return f;
    return store_->CreateJob(job, first);
  }
  absl::Status AppendPlan(const v1::VersionedPlan& plan) override {
    if (absl::Status f = Fault(); !f.ok()) return f;
    return store_->AppendPlan(plan);
  }
  absl::Status DeleteJob(const std::string& job_id) override {
    if (absl::Status f = Fault(); !f.ok()) return f;
    return store_->DeleteJob(job_id);
  }
  absl::Status SetJobState(const std::string& job_id, v1::JobState state,
                           const std::string& message) override {
    if (absl::Status f = Fault(); !f.ok()) return f;
    return store_->SetJobState(job_id, state, message);
  }
  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) override {
    return store_->GetPlan(job_id, version);
  }
  absl::Status PutWorker(const WorkerRecord& worker) override {
    if (absl::Status f = Fault(); !f.ok()) return f;
    return store_->PutWorker(worker);
  }
  absl::Status AppendStepReport(const v1::ReportStepRequest& report) override {
    if (absl::Status f = Fault(); !f.ok()) return f;
    return store_->AppendStepReport(report);
  }
  absl::StatusOr<std::vector<v1::ReportStepRequest>> RecentStepReports(const std::string& job_id,
                                                                       int limit,
                                                                       int64_t max_bytes) override {
    return store_->RecentStepReports(job_id, limit, max_bytes);
  }
  absl::StatusOr<std::vector<StoredJob>> Load() override { return store_->Load(); }

 private:
  absl::Status Fault() {
    if (errno_ == 0) return absl::OkStatus();
    ++refused_;
    const std::string message = absl::StrCat("injected: ", std::strerror(errno_));
    if (errno_ == ENOSPC) return absl::ResourceExhaustedError(message);
    return absl::UnavailableError(message);
  }

  std::unique_ptr<Store> store_ = NewMemoryStore();
  int errno_ = 0;
  int refused_ = 0;
};

}  // namespace pipeplan::server::testing

#endif  // PIPEPLAN_TESTS_UNIT_SERVER_FAULT_INJECTING_STORE_H_
