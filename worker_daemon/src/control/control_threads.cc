#include "control_threads.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipeplan/common/retry_policy.h"

namespace pipeplan::worker {
namespace {

// Every device `plan` gives a rank, in any replica.
std::vector<std::string> PlanDevices(const v1::Plan& plan) {
  std::vector<std::string> devices;
  auto add = [&devices](const std::string& d) {
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  };
  for (const v1::Stage& s : plan.stages()) add(s.device_id());
  for (const v1::Replica& r : plan.replicas()) {
    for (const std::string& d : r.rank_device_ids()) add(d);
  }
  return devices;
}

}  // namespace

ControlThreads::ControlThreads(PlannerApi& planner, const WorkerOptions& options,
                               v1::WorkerInfo info, ControlState& state)
    : planner_(planner), options_(options), info_(std::move(info)), state_(state) {
  watcher_ = std::thread([this] { WatchLoop(); });
  heart_ = std::thread([this] { HeartbeatLoop(); });
}

ControlThreads::~ControlThreads() { Stop(); }

void ControlThreads::Stop() {
  state_.Shutdown();
  if (watcher_.joinable()) watcher_.join();
  if (heart_.joinable()) heart_.join();
}

void ControlThreads::WatchLoop() {
  // A watch that ends is opened again after the one retry policy's backoff.
  common::Backoff backoff(common::RetryPolicy{});
  while (true) {
    v1::WatchPlanRequest req;
    req.set_job_id(options_.job_id);
    req.set_worker_id(options_.worker_id);
    req.set_known_version(state_.Latest());
    std::unique_ptr<client::PlanWatch> watch = planner_.WatchPlan(req);
    if (!state_.AttachWatch(watch.get())) break;
    v1::PlanUpdate update;
    while (watch->Next(&update)) {
      state_.SawPlan(update.version(), PlanDevices(update.plan()));
      backoff.Reset();
    }
    // NOT_FOUND: the job is gone (WatchPlan answers nothing else with it).
    const bool job_gone = watch->Finish().code() == absl::StatusCode::kNotFound;
    if (state_.DetachWatch(job_gone)) break;
    if (state_.SleepOrShutdown(backoff.Next())) break;
  }
}

absl::StatusOr<v1::HeartbeatResponse> ControlThreads::HeartbeatOnce() {
  std::optional<ControlState::PeerFailureReport> failure = state_.TakePeerFailure();
  if (!failure) return planner_.Heartbeat(options_.job_id, options_.worker_id);
  v1::HeartbeatRequest req;
  req.set_job_id(options_.job_id);
  req.set_worker_id(options_.worker_id);
  req.set_failed_version(failure->version);
  for (const std::string& d : failure->unreachable) req.add_unreachable_devices(d);
  return planner_.ReportPeerFailure(req);
}

void ControlThreads::HeartbeatLoop() {
  while (!state_.SleepUntilHeartbeat(state_.Lease() / 3)) {
    absl::StatusOr<v1::HeartbeatResponse> hb = HeartbeatOnce();
    if (hb.ok()) {
      state_.SawVersion(hb->current_plan_version());
      if (hb->job_state() == v1::JOB_COMPLETED) state_.MarkJobCompleted();
    } else if (hb.status().code() == absl::StatusCode::kFailedPrecondition) {
      // The job does not know this worker (e.g. a planner restart lost it).
      (void)planner_.RegisterWorker(options_.job_id, info_);
    } else if (hb.status().code() == absl::StatusCode::kNotFound) {
      state_.MarkJobDeleted();
    }
  }
}

}  // namespace pipeplan::worker
