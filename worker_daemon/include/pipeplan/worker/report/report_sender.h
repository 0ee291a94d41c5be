// Delivers step reports to the planner from a thread of its own, so a step
// never waits for the planner. Reports wait in a bounded buffer while the
// planner is down or cannot store them (UNAVAILABLE, RESOURCE_EXHAUSTED,
// DEADLINE_EXCEEDED: retried with backoff, 100 ms to 2 s) and go out in order
// once it answers again. Each report carries this run's id and a sequence
// number, so one resent after a lost answer is stored once (the planner
// drops repeats). When the buffer is full the oldest report is dropped and
// counted. Backoffs are timed by a Clock, so tests run them in virtual time.
#ifndef PIPEPLAN_WORKER_SRC_REPORT_SENDER_H_
#define PIPEPLAN_WORKER_SRC_REPORT_SENDER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "pipeplan/worker/env/clock.h"
#include "pipeplan/worker/env/planner_api.h"
#include "pipeplan/worker/env/worker_options.h"
#include "pipeplan/worker/metrics/worker_metrics.h"

namespace pipeplan::worker {

class ReportSender {
 public:
  // Starts the sending thread. Everything passed in must outlive this;
  // `metrics` may be null. `saw_version` is told the current plan version
  // of every answer (ControlState::SawVersion), on the sending thread.
  ReportSender(PlannerApi& planner, const WorkerOptions& options,
               std::function<void(int64_t)> saw_version, WorkerMetrics* metrics, std::string run_id,
               Clock& clock = RealClock(), size_t capacity = 10'000);
  // Stops the thread; reports still buffered are dropped (Flush first).
  ~ReportSender();
  ReportSender(const ReportSender&) = delete;
  ReportSender& operator=(const ReportSender&) = delete;

  // Numbers `report` and queues it; never blocks on the planner. Returns
  // "ok" (queued) or "dropped_oldest" (the buffer was full).
  std::string Add(v1::ReportStepRequest report) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `timeout` for every queued report to be delivered; false
  // when some are still waiting.
  bool Flush(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  size_t buffered() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();
  // One try at the oldest report: true when it left the buffer (delivered or
  // refused for good), false to retry after a backoff.
  bool SendOldest(const v1::ReportStepRequest& report);

  PlannerApi& planner_;
  const WorkerOptions& options_;
  const std::function<void(int64_t)> saw_version_;
  Clock& clock_;
  WorkerMetrics* const metrics_;
  const std::string run_id_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<v1::ReportStepRequest> queue_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_REPORT_SENDER_H_
