#include "pipeplan/worker/report/report_sender.h"

#include <algorithm>
#include <utility>

#include "pipeplan/common/retry_policy.h"

namespace pipeplan::worker {

ReportSender::ReportSender(PlannerApi& planner, const WorkerOptions& options,
                           std::function<void(int64_t)> saw_version, WorkerMetrics* metrics,
                           std::string run_id, Clock& clock, size_t capacity)
    : planner_(planner),
      options_(options),
      saw_version_(std::move(saw_version)),
      clock_(clock),
      metrics_(metrics),
      run_id_(std::move(run_id)),
      capacity_(std::max<size_t>(1, capacity)) {
  thread_ = std::thread([this] { Loop(); });
}

ReportSender::~ReportSender() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

std::string ReportSender::Add(v1::ReportStepRequest report) {
  absl::MutexLock l(&mu_);
  report.set_run_id(run_id_);
  report.set_seq(next_seq_++);
  std::string result = "ok";
  if (queue_.size() >= capacity_) {
    queue_.pop_front();
    if (metrics_) metrics_->CountDroppedReports(1);
    result = "dropped_oldest";
  }
  queue_.push_back(std::move(report));
  if (metrics_) metrics_->SetBufferedReports(static_cast<int64_t>(queue_.size()));
  return result;
}

bool ReportSender::Flush(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
}

size_t ReportSender::buffered() const {
  absl::MutexLock l(&mu_);
  return queue_.size();
}

void ReportSender::Loop() {
  common::Backoff backoff(common::RetryPolicy{});
  while (true) {
    v1::ReportStepRequest report;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      report = queue_.front();
    }
    const bool done = SendOldest(report);
    absl::MutexLock l(&mu_);
    if (done) {
      // Add may have dropped it meanwhile (a full buffer): pop only the same.
      if (!queue_.empty() && queue_.front().seq() == report.seq()) queue_.pop_front();
      if (metrics_) metrics_->SetBufferedReports(static_cast<int64_t>(queue_.size()));
      backoff.Reset();
      continue;
    }
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    if (clock_.AwaitWithTimeout(mu_, absl::Condition(&stopping), backoff.Next())) return;
  }
}

bool ReportSender::SendOldest(const v1::ReportStepRequest& report) {
  absl::StatusOr<v1::ReportStepResponse> resp = planner_.ReportStep(report);
  if (resp.ok()) {
    saw_version_(resp->current_plan_version());
    return true;
  }
  if (common::IsRetryable(resp.status())) return false;
  if (resp.status().code() == absl::StatusCode::kFailedPrecondition) {
    // Not registered (the heartbeat thread registers again) or a version the
    // planner does not have: learn the current version; keep the report
    // while the worker is unknown, drop it when its version is the problem.
    absl::StatusOr<v1::HeartbeatResponse> hb =
        planner_.Heartbeat(options_.job_id, options_.worker_id);
    if (hb.ok()) {
      saw_version_(hb->current_plan_version());
      return true;
    }
    return false;
  }
  // NOT_FOUND (the job is gone) or a report the planner refuses for good.
  return true;
}

}  // namespace pipeplan::worker
