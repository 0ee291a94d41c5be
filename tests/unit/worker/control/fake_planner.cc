#include "fake_planner.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pipeplan::worker::testing {
namespace {

// A watch stream with no updates: it ends only when cancelled.
class IdleWatch final : public client::PlanWatch {
 public:
  bool Next(v1::PlanUpdate*) override {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(&cancelled_));
    return false;
  }
  void Cancel() override {
    absl::MutexLock l(&mu_);
    cancelled_ = true;
  }
  absl::Status Finish() override { return absl::CancelledError("watch cancelled"); }

 private:
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

void FakePlanner::AddPlan(int64_t version, v1::VersionedPlan plan) {
  absl::MutexLock l(&mu_);
  plans_[version] = std::move(plan);
}

void FakePlanner::FailNextReports(std::vector<absl::Status> answers) {
  absl::MutexLock l(&mu_);
  report_failures_.insert(report_failures_.end(), answers.begin(), answers.end());
}

void FakePlanner::SetHeartbeat(absl::StatusOr<v1::HeartbeatResponse> answer) {
  absl::MutexLock l(&mu_);
  heartbeat_ = std::move(answer);
}

bool FakePlanner::AwaitReports(
    const std::function<bool(const std::vector<v1::ReportStepRequest>&)>& done,
    absl::Duration limit) {
  absl::MutexLock l(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done(reports_); };
  return mu_.AwaitWithTimeout(absl::Condition(&ready), limit);
}

std::vector<v1::ReportStepRequest> FakePlanner::reports() const {
  absl::MutexLock l(&mu_);
  return reports_;
}

int FakePlanner::report_calls() const {
  absl::MutexLock l(&mu_);
  return report_calls_;
}

int FakePlanner::heartbeat_calls() const {
  absl::MutexLock l(&mu_);
  return heartbeat_calls_;
}

int FakePlanner::register_calls() const {
  absl::MutexLock l(&mu_);
  return register_calls_;
}

std::vector<int64_t> FakePlanner::fetched_versions() const {
  absl::MutexLock l(&mu_);
  return fetched_;
}

absl::StatusOr<v1::Assignment> FakePlanner::RegisterWorker(const std::string&,
                                                           const v1::WorkerInfo&) {
  absl::MutexLock l(&mu_);
  ++register_calls_;
  return v1::Assignment();
}

absl::StatusOr<v1::HeartbeatResponse> FakePlanner::Heartbeat(const std::string&,
                                                             const std::string&) {
  absl::MutexLock l(&mu_);
  ++heartbeat_calls_;
  return heartbeat_;
}

absl::StatusOr<v1::HeartbeatResponse> FakePlanner::ReportPeerFailure(
    const v1::HeartbeatRequest& request) {
  absl::MutexLock l(&mu_);
  ++heartbeat_calls_;
  failure_reports_.push_back(request);
  return heartbeat_;
}

std::vector<v1::HeartbeatRequest> FakePlanner::failure_reports() const {
  absl::MutexLock l(&mu_);
  return failure_reports_;
}

std::unique_ptr<client::PlanWatch> FakePlanner::WatchPlan(const v1::WatchPlanRequest&) {
  return std::make_unique<IdleWatch>();
}

absl::StatusOr<v1::VersionedPlan> FakePlanner::GetPlan(const std::string&, int64_t version) {
  absl::MutexLock l(&mu_);
  fetched_.push_back(version);
  auto it = plans_.find(version);
  if (it == plans_.end()) return absl::NotFoundError(absl::StrCat("no plan version ", version));
  return it->second;
}

absl::StatusOr<v1::VersionedPlan> FakePlanner::GetContingencies(const std::string&, int64_t version,
                                                                int64_t known_generation) {
  absl::MutexLock l(&mu_);
  auto it = plans_.find(version);
  if (it == plans_.end()) return absl::NotFoundError(absl::StrCat("no plan version ", version));
  v1::VersionedPlan out;
  out.set_version(version);
  out.set_contingency_generation(it->second.contingency_generation());
  if (known_generation != out.contingency_generation()) {
    *out.mutable_contingencies() = it->second.contingencies();
  }
  return out;
}

absl::StatusOr<v1::Job> FakePlanner::GetJob(const std::string& job_id) {
  v1::Job job;
  job.set_id(job_id);
  return job;
}

absl::StatusOr<v1::ReportStepResponse> FakePlanner::ReportStep(
    const v1::ReportStepRequest& report) {
  absl::MutexLock l(&mu_);
  ++report_calls_;
  if (!report_failures_.empty()) {
    absl::Status s = report_failures_.front();
    report_failures_.pop_front();
    return s;
  }
  reports_.push_back(report);
  return v1::ReportStepResponse();
}

absl::StatusOr<v1::Job> FakePlanner::FinishWorker(const v1::FinishWorkerRequest& request) {
  v1::Job job;
  job.set_id(request.job_id());
  return job;
}

absl::Status FakePlanner::RendezvousSet(const std::string&, const std::string& key,
                                        const std::string& value) {
  absl::MutexLock l(&mu_);
  keys_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> FakePlanner::RendezvousGet(const std::string&,
                                                                      const std::string& key) {
  absl::MutexLock l(&mu_);
  auto it = keys_.find(key);
  if (it == keys_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

v1::VersionedPlan PipelineOn(const std::vector<std::string>& devices, int microbatches,
                             int64_t version) {
  v1::VersionedPlan vp;
  vp.set_version(version);
  v1::Plan& plan = *vp.mutable_plan();
  plan.set_schedule(v1::SCHEDULE_1F1B);
  plan.set_microbatches(microbatches);
  for (int s = 0; s < static_cast<int>(devices.size()); ++s) {
    v1::Stage* st = plan.add_stages();
    st->set_index(s);
    st->set_device_id(devices[s]);
    st->set_forward_seconds(0.001);
    st->set_backward_seconds(0.002);
  }
  return vp;
}

}  // namespace pipeplan::worker::testing
