// What the worker's watch and heartbeat threads learn from the planner (the
// newest plan version, whether the job is gone or completed, the lease),
// shared with the step loop. Thread-safe; internal to libpipeplan_worker.
#ifndef PIPEPLAN_WORKER_SRC_CONTROL_STATE_H_
#define PIPEPLAN_WORKER_SRC_CONTROL_STATE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/worker/env/clock.h"

namespace pipeplan::worker {

class ControlState {
 public:
  // `clock` (must outlive this) times SleepOrShutdown.
  explicit ControlState(Clock& clock = RealClock()) : clock_(clock) {}

  // Remembers `version` when it is newer than any seen so far, and then
  // tells the listener (on the calling thread, outside the lock).
  void SawVersion(int64_t version) ABSL_LOCKS_EXCLUDED(mu_) {
    std::function<void(int64_t)> listener;
    {
      absl::MutexLock l(&mu_);
      if (version <= latest_version_) return;
      latest_version_ = version;
      listener = listener_;
    }
    if (listener) listener(version);
  }
  // Called with every newer version from now on (the torch executor starts
  // compiling its stages at once). Must stay callable until Shutdown.
  void OnNewVersion(std::function<void(int64_t)> listener) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    listener_ = std::move(listener);
  }
  int64_t Latest() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return latest_version_;
  }
  // The watch stream's plan of `version` uses `devices` (every replica's):
  // the stall watch reads whether the newest version left a device out.
  void SawPlan(int64_t version, std::vector<std::string> devices) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock l(&mu_);
      if (version < devices_version_) return;
      devices_version_ = version;
      latest_devices_ = std::move(devices);
    }
    SawVersion(version);
  }
  // The devices of the newest version known; empty while its plan has not
  // come (a heartbeat named the version before the watch sent it).
  std::vector<std::string> LatestDevices() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (devices_version_ != latest_version_) return {};
    return latest_devices_;
  }

  void MarkJobDeleted() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    job_deleted_ = true;
  }
  bool JobDeleted() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return job_deleted_;
  }

  // The job completed (its heartbeat says so): a worker without work in it
  // stops waiting for one.
  void MarkJobCompleted() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    job_completed_ = true;
  }
  bool JobCompleted() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return job_completed_;
  }

  void SetLease(absl::Duration lease) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    lease_ = lease;
  }
  absl::Duration Lease() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return lease_;
  }

  // Sleeps up to `d`; true (at once) when shutting down.
  bool SleepOrShutdown(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    clock_.AwaitWithTimeout(mu_, absl::Condition(&shutting_down_), d);
    return shutting_down_;
  }

  // The step loop closed its transport of `version`: it failed (the step
  // was dropped; `unreachable` are the devices whose sockets closed or
  // reset), or the rank leaves it alive (a leave, a switch). The heartbeat
  // thread reports it at once (a newer report replaces an unsent one): the
  // planner declares a dead peer lost within its suspect grace instead of a
  // lease, and believes a peer that reported closing the version alive.
  struct PeerFailureReport {
    int64_t version = 0;
    std::vector<std::string> unreachable;
  };
  void ReportPeerFailure(PeerFailureReport report) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (peer_failure_ && peer_failure_->version > report.version) return;
    peer_failure_ = std::move(report);
  }
  std::optional<PeerFailureReport> TakePeerFailure() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    std::optional<PeerFailureReport> out = std::move(peer_failure_);
    peer_failure_.reset();
    return out;
  }
  // Sleeps up to `d` or until a peer failure waits to be reported; true (at
  // once) when shutting down.
  bool SleepUntilHeartbeat(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutting_down_ || peer_failure_.has_value();
    };
    clock_.AwaitWithTimeout(mu_, absl::Condition(&wake), d);
    return shutting_down_;
  }

  // The watch stream Shutdown cancels. false (and nothing attached) when
  // already shutting down.
  bool AttachWatch(client::PlanWatch* watch) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (shutting_down_) return false;
    watch_ = watch;
    return true;
  }
  // Detaches the ended watch stream; with `job_gone` the job is marked
  // deleted. true when the watch thread should end: shutting down or gone.
  bool DetachWatch(bool job_gone) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    watch_ = nullptr;
    if (shutting_down_) return true;
    if (job_gone) job_deleted_ = true;
    return job_gone;
  }

  // Wakes every SleepOrShutdown and cancels the attached watch stream.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    shutting_down_ = true;
    listener_ = nullptr;
    if (watch_) watch_->Cancel();
  }

 private:
  Clock& clock_;
  mutable absl::Mutex mu_;
  int64_t latest_version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t devices_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> latest_devices_ ABSL_GUARDED_BY(mu_);
  bool job_deleted_ ABSL_GUARDED_BY(mu_) = false;
  bool job_completed_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  client::PlanWatch* watch_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::Seconds(10);
  std::function<void(int64_t)> listener_ ABSL_GUARDED_BY(mu_);
  std::optional<PeerFailureReport> peer_failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_CONTROL_STATE_H_
