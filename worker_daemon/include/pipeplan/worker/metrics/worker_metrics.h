// The worker's Prometheus endpoint: pipeplan_worker_step_seconds
// (histogram), pipeplan_worker_steps_total, pipeplan_worker_plan_version,
// pipeplan_worker_loss (mlp and torch executors, last stage),
// pipeplan_worker_samples_per_second (last step),
// pipeplan_worker_dropped_steps_total (steps a failed peer cut short),
// pipeplan_worker_buffered_reports (step reports waiting for the planner),
// pipeplan_worker_dropped_reports_total (reports the full buffer let go), of
// the last step pipeplan_worker_compute_seconds,
// pipeplan_worker_comm_seconds (blocked on SEND/RECV),
// pipeplan_worker_bubble_ratio (idle share) and
// pipeplan_worker_peak_memory_bytes (executor's peak so far), and per plan
// switch pipeplan_worker_stage_compile_seconds and
// pipeplan_worker_switch_seconds (histograms). Labels: job, worker (one
// series per daemon; no per-step or per-microbatch labels).
#ifndef PIPEPLAN_WORKER_METRICS_H_
#define PIPEPLAN_WORKER_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace pipeplan::worker {

class WorkerMetrics {
 public:
  // `listen` is HOST:PORT; INVALID_ARGUMENT/UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<WorkerMetrics>> Start(const std::string& listen,
                                                              const std::string& job,
                                                              const std::string& worker);
  ~WorkerMetrics();
  std::string address() const;
  void ObserveStep(double seconds);
  void SetPlanVersion(int64_t version);
  void SetLoss(double loss);
  void CountDroppedStep();
  void SetBufferedReports(int64_t n);
  void CountDroppedReports(int64_t n);
  // The last step's measurements of this rank.
  void SetStepBreakdown(double compute_seconds, double comm_seconds, double bubble_ratio,
                        double peak_memory_bytes);
  void SetOptimizerSeconds(double seconds);
  // The last step's exposed gradient all-reduce (replicas only).
  void SetAllReduceExposedSeconds(double seconds);
  void SetSamplesPerSecond(double samples_per_second);
  // The device memory this worker registered (--memory-bytes): what the
  // dashboard's memory headroom divides the peak by.
  void SetDeviceMemoryBytes(double bytes);
  // One plan switch: compiling the new version's stages (mostly before the
  // switch, in the background) and the time training paused for it.
  void ObserveSwitch(double compile_seconds, double switch_seconds);

 private:
  struct Impl;
  explicit WorkerMetrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_METRICS_H_
