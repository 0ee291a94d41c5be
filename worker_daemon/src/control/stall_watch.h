// Ends a plan version's communication once it stalls behind a newer one.
//
// A hung peer (stopped, swapped out, a wedged host) closes no socket, so the
// ranks waiting on it learn nothing before --comm-timeout-seconds (60 s by
// default). The planner notices the hang through the peer's missed
// heartbeats and publishes a version without it. When a newer version is
// known and the step or boundary vote the step loop is in has run for
// `grace` since both began, the watch aborts the running transport
// (Transport::Abort): the waits end with ABORTED, the step is dropped as
// after any peer failure, and the ranks switch. Steps that still complete
// on the running version while the new one compiles re-arm the watch, so a
// planned switch is never aborted.
//
// When the newer version leaves out a device the running one uses, the
// planner published it because that device's worker was lost (or left):
// a wait on it will not end, so the watch aborts after the shorter
// `lost_grace` instead (issue 26: abort the collectives as soon as the
// coordinator knows the group died). Internal to libpipeplan_worker.
#ifndef PIPEPLAN_WORKER_SRC_STALL_WATCH_H_
#define PIPEPLAN_WORKER_SRC_STALL_WATCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/worker/env/clock.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

// What a version that leaves out one of `devices` (the running version's)
// shortens the stall watch's grace to.
struct StallShrink {
  std::vector<std::string> devices;
  absl::Duration grace = absl::InfiniteDuration();
};

class StallWatch {
 public:
  // `latest_version` answers the newest plan version the worker knows of
  // (ControlState::Latest); `on_abort` is told the version it aborted.
  // Grace and polls are measured on `clock`, which must outlive this.
  // `latest_devices` (may be null) answers the devices of that version, or
  // nothing while they are not known (ControlState::LatestDevices).
  using DevicesFn = std::function<std::vector<std::string>()>;
  StallWatch(std::function<int64_t()> latest_version, std::function<void(int64_t)> on_abort,
             absl::Duration poll = absl::Milliseconds(100), Clock& clock = RealClock(),
             DevicesFn latest_devices = nullptr);
  ~StallWatch();  // stops and joins the watch thread
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  using Shrink = StallShrink;

  // Around one step or vote of `version` over `transport`: Arm before, Disarm
  // after. Once Disarm returns the watch no longer touches `transport`.
  void Arm(Transport* transport, int64_t version, absl::Duration grace, Shrink shrink = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  void Disarm() ABSL_LOCKS_EXCLUDED(mu_);

  // Arm for the scope's lifetime.
  class Scope {
   public:
    Scope(StallWatch& watch, Transport* transport, int64_t version, absl::Duration grace,
          Shrink shrink = {})
        : watch_(watch) {
      watch_.Arm(transport, version, grace, std::move(shrink));
    }
    ~Scope() { watch_.Disarm(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StallWatch& watch_;
  };

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  void CheckLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The grace that applies now: shrink_.grace once the newest version
  // leaves out one of shrink_.devices.
  absl::Duration GraceLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<int64_t()> latest_version_;
  const std::function<void(int64_t)> on_abort_;
  const absl::Duration poll_;
  Clock& clock_;
  const DevicesFn latest_devices_;
  absl::Mutex mu_;
  Transport* transport_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration grace_ ABSL_GUARDED_BY(mu_);
  Shrink shrink_ ABSL_GUARDED_BY(mu_);
  absl::Time armed_at_ ABSL_GUARDED_BY(mu_);
  // When the watch first saw a newer version during this arming.
  absl::Time newer_seen_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_STALL_WATCH_H_
