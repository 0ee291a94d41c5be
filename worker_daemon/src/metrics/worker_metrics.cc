#include "pipeplan/worker/metrics/worker_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/strings/str_cat.h"
#include "metrics_endpoint.h"

namespace pipeplan::worker {

struct WorkerMetrics::Impl {
  std::string host;
  int port = 0;
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<MetricsEndpoint> endpoint;
  prometheus::Histogram* step_seconds = nullptr;
  prometheus::Counter* steps = nullptr;
  prometheus::Gauge* version = nullptr;
  prometheus::Gauge* loss = nullptr;
  prometheus::Counter* dropped_steps = nullptr;
  prometheus::Gauge* buffered_reports = nullptr;
  prometheus::Counter* dropped_reports = nullptr;
  prometheus::Gauge* compute_seconds = nullptr;
  prometheus::Gauge* comm_seconds = nullptr;
  prometheus::Gauge* optimizer_seconds = nullptr;
  prometheus::Gauge* allreduce_exposed_seconds = nullptr;
  prometheus::Gauge* bubble_ratio = nullptr;
  prometheus::Gauge* peak_memory_bytes = nullptr;
  prometheus::Gauge* device_memory_bytes = nullptr;
  prometheus::Gauge* samples_per_second = nullptr;
  prometheus::Histogram* compile_seconds = nullptr;
  prometheus::Histogram* switch_seconds = nullptr;

  // Steps, versions, losses and the report buffer.
  void AddProgressMetrics(const prometheus::Labels& labels);
  // Where the last step's time and memory went, and what switches cost.
  void AddBreakdownMetrics(const prometheus::Labels& labels);
};

namespace {

prometheus::Gauge* AddGauge(prometheus::Registry& registry, const char* name, const char* help,
                            const prometheus::Labels& labels) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(labels);
}

prometheus::Counter* AddCounter(prometheus::Registry& registry, const char* name, const char* help,
                                const prometheus::Labels& labels) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
}

prometheus::Histogram* AddHistogram(prometheus::Registry& registry, const char* name,
                                    const char* help, const prometheus::Labels& labels,
                                    const prometheus::Histogram::BucketBoundaries& buckets) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add(labels,
                                                                                    buckets);
}

}  // namespace

void WorkerMetrics::Impl::AddProgressMetrics(const prometheus::Labels& labels) {
  prometheus::Registry& r = *registry;
  Impl& m = *this;
  m.step_seconds = AddHistogram(
      r, "pipeplan_worker_step_seconds", "Wall time of one training step on this worker.", labels,
      {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  m.steps = AddCounter(r, "pipeplan_worker_steps_total", "Training steps completed by this worker.",
                       labels);
  m.version = AddGauge(r, "pipeplan_worker_plan_version", "Plan version this worker runs.", labels);
  m.loss = AddGauge(r, "pipeplan_worker_loss",
                    "Loss of the last step (mlp and torch executors, last stage only).", labels);
  m.dropped_steps = AddCounter(r, "pipeplan_worker_dropped_steps_total",
                               "Steps dropped because a peer failed (the job replans).", labels);
  m.buffered_reports = AddGauge(r, "pipeplan_worker_buffered_reports",
                                "Step reports waiting for the planner to accept them.", labels);
  m.dropped_reports =
      AddCounter(r, "pipeplan_worker_dropped_reports_total",
                 "Step reports dropped because the report buffer was full.", labels);
}

void WorkerMetrics::Impl::AddBreakdownMetrics(const prometheus::Labels& labels) {
  prometheus::Registry& r = *registry;
  Impl& m = *this;
  m.compute_seconds = AddGauge(r, "pipeplan_worker_compute_seconds",
                               "Compute (F, I, W, B) seconds of the last step.", labels);
  m.comm_seconds = AddGauge(r, "pipeplan_worker_comm_seconds",
                            "Seconds the last step blocked on SEND/RECV.", labels);
  m.optimizer_seconds = AddGauge(
      r, "pipeplan_worker_optimizer_seconds",
      "Seconds of the last step's update: gradient reductions, clipping, optimizer.", labels);
  m.allreduce_exposed_seconds =
      AddGauge(r, "pipeplan_worker_allreduce_exposed_seconds",
               "Seconds the last update waited for the gradient all-reduce over replicas.", labels);
  m.bubble_ratio = AddGauge(r, "pipeplan_worker_bubble_ratio",
                            "Idle share of the last step: 1 - compute / step.", labels);
  m.peak_memory_bytes =
      AddGauge(r, "pipeplan_worker_peak_memory_bytes",
               "Peak bytes the executor held (tracked tensors or allocator peak).", labels);
  m.device_memory_bytes =
      AddGauge(r, "pipeplan_worker_device_memory_bytes",
               "Memory of the worker's device, as registered with the planner.", labels);
  m.samples_per_second =
      AddGauge(r, "pipeplan_worker_samples_per_second",
               "Samples (rows of the global batch) per second of the last step.", labels);
  const prometheus::Histogram::BucketBoundaries switch_buckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                                                  2.5,  5,    10,  30,   60,  300};
  m.compile_seconds =
      AddHistogram(r, "pipeplan_worker_stage_compile_seconds",
                   "Compiling a plan version's stages (in the background, before the switch).",
                   labels, switch_buckets);
  m.switch_seconds = AddHistogram(r, "pipeplan_worker_switch_seconds",
                                  "Training paused for a plan switch: waiting for the compile, "
                                  "connecting, moving state.",
                                  labels, switch_buckets);
}

WorkerMetrics::WorkerMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerMetrics::~WorkerMetrics() = default;

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Start(const std::string& listen,
                                                                    const std::string& job,
                                                                    const std::string& worker) {
  auto impl = std::make_unique<Impl>();
  const prometheus::Labels labels = {{"job", job}, {"worker", worker}};
  impl->AddProgressMetrics(labels);
  impl->AddBreakdownMetrics(labels);
  absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
      MetricsEndpoint::Start(listen, impl->registry);
  if (!endpoint.ok()) return endpoint.status();
  impl->endpoint = *std::move(endpoint);
  impl->port = impl->endpoint->port();
  impl->host = listen.substr(0, listen.rfind(':'));
  return std::unique_ptr<WorkerMetrics>(new WorkerMetrics(std::move(impl)));
}

std::string WorkerMetrics::address() const { return absl::StrCat(impl_->host, ":", impl_->port); }
void WorkerMetrics::ObserveStep(double seconds) {
  impl_->step_seconds->Observe(seconds);
  impl_->steps->Increment();
}
void WorkerMetrics::SetPlanVersion(int64_t version) {
  impl_->version->Set(static_cast<double>(version));
}
void WorkerMetrics::SetLoss(double loss) { impl_->loss->Set(loss); }
void WorkerMetrics::CountDroppedStep() { impl_->dropped_steps->Increment(); }
void WorkerMetrics::SetBufferedReports(int64_t n) {
  impl_->buffered_reports->Set(static_cast<double>(n));
}
void WorkerMetrics::CountDroppedReports(int64_t n) {
  impl_->dropped_reports->Increment(static_cast<double>(n));
}
void WorkerMetrics::SetStepBreakdown(double compute_seconds, double comm_seconds,
                                     double bubble_ratio, double peak_memory_bytes) {
  impl_->compute_seconds->Set(compute_seconds);
  impl_->comm_seconds->Set(comm_seconds);
  impl_->bubble_ratio->Set(bubble_ratio);
  impl_->peak_memory_bytes->Set(peak_memory_bytes);
}
void WorkerMetrics::SetOptimizerSeconds(double seconds) { impl_->optimizer_seconds->Set(seconds); }
void WorkerMetrics::SetAllReduceExposedSeconds(double seconds) {
  impl_->allreduce_exposed_seconds->Set(seconds);
}
void WorkerMetrics::SetSamplesPerSecond(double samples_per_second) {
  impl_->samples_per_second->Set(samples_per_second);
}
void WorkerMetrics::SetDeviceMemoryBytes(double bytes) { impl_->device_memory_bytes->Set(bytes); }
void WorkerMetrics::ObserveSwitch(double compile_seconds, double switch_seconds) {
  impl_->compile_seconds->Observe(compile_seconds);
  impl_->switch_seconds->Observe(switch_seconds);
}

}  // namespace pipeplan::worker
