// An in-memory Store with the same contract as the SQLite one, for tests.
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/server/store/store.h"

namespace pipeplan::server {
namespace {

class MemoryStore : public Store {
 public:
  explicit MemoryStore(int report_window) : report_window_(report_window) {}

  absl::Status CreateJob(const JobRecord& job, const v1::VersionedPlan& first) override {
    absl::MutexLock l(&mu_);
    if (jobs_.count(job.id)) return absl::AlreadyExistsError(absl::StrCat("job ", job.id));
    Entry& e = jobs_[job.id];
    e.job = job;
    e.job.current_version = first.version();
    e.plans[first.version()] = first;
    return absl::OkStatus();
  }

  absl::Status AppendPlan(const v1::VersionedPlan& plan) override {
    absl::MutexLock l(&mu_);
    PIPEPLAN_ASSIGN_OR_RETURN(Entry * e, Find(plan.job_id()));
    if (plan.version() != e->job.current_version + 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("version ", plan.version(), " does not follow ", e->job.current_version));
    }
    e->plans[plan.version()] = plan;
    e->job.current_version = plan.version();
    return absl::OkStatus();
  }

  absl::Status DeleteJob(const std::string& job_id) override {
    absl::MutexLock l(&mu_);
    if (jobs_.erase(std::string(job_id)) == 0) {
      return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
    }
    return absl::OkStatus();
  }

  absl::Status SetJobState(const std::string& job_id, v1::JobState state,
                           const std::string& failure_message) override {
    absl::MutexLock l(&mu_);
    PIPEPLAN_ASSIGN_OR_RETURN(Entry * e, Find(job_id));
    e->job.state = state;
    e->job.failure_message = failure_message;
    return absl::OkStatus();
  }

  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) override {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(std::string(job_id));
    if (it == jobs_.end() || !it->second.plans.count(version)) {
      return absl::NotFoundError(absl::StrCat("job ", job_id, " has no plan version ", version));
    }
    return it->second.plans.at(version);
  }

  absl::Status PutWorker(const WorkerRecord& worker) override {
    absl::MutexLock l(&mu_);
    PIPEPLAN_ASSIGN_OR_RETURN(Entry * e, Find(worker.job_id));
    e->workers[worker.info.worker_id()] = worker;
    return absl::OkStatus();
  }

  absl::Status AppendStepReport(const v1::ReportStepRequest& report) override {
    absl::MutexLock l(&mu_);
    PIPEPLAN_ASSIGN_OR_RETURN(Entry * e, Find(report.job_id()));
    e->reports.push_front(report);
    while (static_cast<int>(e->reports.size()) > report_window_) e->reports.pop_back();
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<v1::ReportStepRequest>> RecentStepReports(const std::string& job_id,
                                                                       int limit,
                                                                       int64_t max_bytes) override {
    absl::MutexLock l(&mu_);
    std::vector<v1::ReportStepRequest> out;
    auto it = jobs_.find(std::string(job_id));
    if (it == jobs_.end()) return out;
    int64_t bytes = 0;
    for (const auto& r : it->second.reports) {
      if (static_cast<int>(out.size()) >= limit) break;
      bytes += static_cast<int64_t>(r.ByteSizeLong());
      if (!out.empty() && bytes > max_bytes) break;
      out.push_back(r);
    }
    return out;
  }

  absl::StatusOr<std::vector<StoredJob>> Load() override {
    absl::MutexLock l(&mu_);
    std::vector<StoredJob> out;
    for (const auto& [id, e] : jobs_) {
      StoredJob sj{e.job, e.plans.at(e.job.current_version), {}};
      for (const auto& [wid, w] : e.workers) sj.workers.push_back(w);
      out.push_back(std::move(sj));
    }
    return out;
  }

 private:
  struct Entry {
    JobRecord job;
    std::map<int64_t, v1::VersionedPlan> plans;
    std::map<std::string, WorkerRecord> workers;
    std::deque<v1::ReportStepRequest> reports;
  };
  // The job's entry, or NOT_FOUND "job <id> not found".
  absl::StatusOr<Entry*> Find(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
    return &it->second;
  }

  const int report_window_;
  absl::Mutex mu_;
  std::map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore(int report_window) {
  return std::make_unique<MemoryStore>(report_window);
}

}  // namespace pipeplan::server
