#include "pipeplan/worker/metrics.h"

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
  prometheus::Gauge* samples_per_second = nullptr;
  prometheus::Histogram* compile_seconds = nullptr;
  prometheus::Histogram* switch_seconds = nullptr;
};

WorkerMetrics::WorkerMetrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerMetrics::~WorkerMetrics() = default;

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Start(const std::string& listen,
                                                                    const std::string& job,
                                                                    const std::string& worker) {
  auto impl = std::make_unique<Impl>();
  const prometheus::Labels labels = {{"job", job}, {"worker", worker}};
  impl->step_seconds = &prometheus::BuildHistogram()
                            .Name("pipeplan_worker_step_seconds")
                            .Help("Wall time of one training step on this worker.")
                            .Register(*impl->registry)
                            .Add(labels, prometheus::Histogram::BucketBoundaries{
                                             0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                             2.5, 5, 10, 30, 60});
  impl->steps = &prometheus::BuildCounter()
                     .Name("pipeplan_worker_steps_total")
                     .Help("Training steps completed by this worker.")
                     .Register(*impl->registry)
                     .Add(labels);
  impl->version = &prometheus::BuildGauge()
                       .Name("pipeplan_worker_plan_version")
                       .Help("Plan version this worker runs.")
                       .Register(*impl->registry)
                       .Add(labels);
  impl->loss = &prometheus::BuildGauge()
                    .Name("pipeplan_worker_loss")
                    .Help("Loss of the last step (mlp and torch executors, last stage only).")
                    .Register(*impl->registry)
                    .Add(labels);
  impl->samples_per_second =
      &prometheus::BuildGauge()
           .Name("pipeplan_worker_samples_per_second")
           .Help("Samples (rows of the global batch) per second of the last step.")
           .Register(*impl->registry)
           .Add(labels);
  const prometheus::Histogram::BucketBoundaries switch_buckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                                                  2.5,  5,    10,  30,   60,  300};
  impl->compile_seconds =
      &prometheus::BuildHistogram()
           .Name("pipeplan_worker_stage_compile_seconds")
           .Help("Compiling a plan version's stages (in the background, before the switch).")
           .Register(*impl->registry)
           .Add(labels, switch_buckets);
  impl->switch_seconds =
      &prometheus::BuildHistogram()
           .Name("pipeplan_worker_switch_seconds")
           .Help(
               "Training paused for a plan switch: waiting for the compile, connecting, "
               "moving state.")
           .Register(*impl->registry)
           .Add(labels, switch_buckets);
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
void WorkerMetrics::SetSamplesPerSecond(double samples_per_second) {
  impl_->samples_per_second->Set(samples_per_second);
}
void WorkerMetrics::ObserveSwitch(double compile_seconds, double switch_seconds) {
  impl_->compile_seconds->Observe(compile_seconds);
  impl_->switch_seconds->Observe(switch_seconds);
}

}  // namespace pipeplan::worker
