// Prometheus metrics of the planner, served by prometheus-cpp's Exposer.
// Metric children are created once and kept (Add at runtime is slow); label
// sets are small and bounded (method x code, worker state, job).
// Thread safety: all methods may be called from any thread.
#ifndef PIPEPLAN_SERVER_OBS_METRICS_H_
#define PIPEPLAN_SERVER_OBS_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace prometheus {
class Counter;
template <typename T>
class Family;
class Exposer;
class Family_Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace pipeplan::server {

class Metrics {
 public:
  // `listen` empty: metrics are kept but not served. Errors: UNAVAILABLE
  // when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(const std::string& listen);
  ~Metrics();

  // The bound metrics port (0 when not served).
  int port() const { return port_; }
  // HOST:PORT as bound: the host of `listen`, the real port; empty when not
  // served.
  const std::string& address() const { return address_; }

  void CountRequest(std::string_view method, std::string_view code);
  void ObserveSolve(double seconds, double gap);
  void SetJobs(int jobs);
  void SetWorkers(int active, int lost);
  // pipeplan_plan_version, pipeplan_plan_step_seconds and
  // pipeplan_plan_bubble_ratio of a job's current plan.
  void SetPlan(const std::string& job_id, int64_t version, double step_seconds,
               double bubble_ratio);
  void RemoveJob(const std::string& job_id);
  void SetSolves(int running, int queued);
  void CountCache(bool hit);
  // Plans published by the replanning policy (`reason`: calibration,
  // worker_lost) or by ReplanJob (requested).
  void CountReplan(std::string_view reason);
  // pipeplan_calibration_factor{job, device}: measured / modelled compute
  // time. Only devices of live jobs: RemoveJob drops a job's devices.
  void SetCalibrationFactor(const std::string& job_id, const std::string& device_id, double factor);

  // A job's current plan measured and predicted (job_observer.h):
  // pipeplan_job_step_seconds{job, kind="measured"|"predicted"},
  // pipeplan_job_bubble_ratio{job, kind}, pipeplan_job_prediction_error_ratio
  // {job}. Measured series appear once there are measured steps.
  struct JobFigures {
    double measured_step_seconds = 0;
    double measured_bubble_ratio = 0;
    double predicted_step_seconds = 0;
    double predicted_bubble_ratio = 0;
    double prediction_error_ratio = 0;
    // pipeplan_replan_prediction_error{job}: the out-of-sample error of the
    // current version (predicted before it ran, version_prediction.h);
    // negative: none yet (no stored prediction or no measured steps).
    double replan_prediction_error = -1;
  };
  void SetJobObservation(const std::string& job_id, const JobFigures& figures);
  // pipeplan_rejected_reports_total{field}: a step report refused
  // (report_guard.h); `field` is the offending field's name.
  void CountRejectedReport(std::string_view field);

  prometheus::Registry& registry() { return *registry_; }

 private:
  Metrics();
  struct Families;

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<Families> f_;
  int port_ = 0;
  std::string address_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, prometheus::Counter*> requests_
      ABSL_GUARDED_BY(mu_);
  struct PlanGauges {
    prometheus::Gauge* version;
    prometheus::Gauge* step;
    prometheus::Gauge* bubble;
  };
  std::map<std::string, PlanGauges> plans_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> replans_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> factors_ ABSL_GUARDED_BY(mu_);
  // (job, family, kind) -> gauge.
  std::map<std::tuple<std::string, prometheus::Family<prometheus::Gauge>*, std::string>,
           prometheus::Gauge*>
      job_gauges_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> rejected_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_OBS_METRICS_H_
