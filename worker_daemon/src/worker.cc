#include "pipeplan/worker/worker.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "control_state.h"
#include "control_threads.h"
#include "event_log.h"
#include "pipeplan/core/status_macros.h"
#include "pipeplan/worker/executor_factory.h"
#include "pipeplan/worker/metrics.h"
#include "pipeplan/worker/nccl_transport.h"
#include "retryable.h"
#include "step_loop.h"

namespace pipeplan::worker {
namespace {

v1::WorkerInfo WorkerInfoFor(const WorkerOptions& o) {
  v1::WorkerInfo info;
  info.set_worker_id(o.worker_id);
  info.set_host(o.listen_host);
  info.set_device_id(o.device_id);
  info.set_memory_bytes(o.memory_bytes);
  info.set_transport_address(absl::StrCat(o.transport, "://", o.listen_host));
  return info;
}

}  // namespace

Worker::Worker(WorkerOptions options) : options_(std::move(options)) {}
Worker::~Worker() = default;

std::string Worker::metrics_address() const { return metrics_ ? metrics_->address() : ""; }

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(WorkerOptions options) {
  if (options.job_id.empty() || options.worker_id.empty() || options.device_id.empty()) {
    return absl::InvalidArgumentError("--job, --worker-id and --device are required");
  }
  if (options.transport != "gloo" && options.transport != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport must be gloo or nccl, got \"", options.transport, "\""));
  }
  if (options.transport == "nccl" && !NcclAvailable()) {
    return absl::FailedPreconditionError(
        "--transport nccl: this pipeplan-worker was built without NCCL");
  }
  PIPEPLAN_RETURN_IF_ERROR(CheckExecutorOptions(options));
  if (options.time_scale < 0 || options.max_message_bytes < 1) {
    return absl::InvalidArgumentError("--time-scale must be >= 0 and --max-message-bytes >= 1");
  }
  if (!(options.slowdown > 0) || !std::isfinite(options.slowdown)) {
    return absl::InvalidArgumentError("--slowdown must be > 0");
  }
  std::unique_ptr<Worker> w(new Worker(std::move(options)));
  PIPEPLAN_ASSIGN_OR_RETURN(w->client_, client::PlannerClient::Connect(w->options_.planner));
  if (w->options_.metrics_listen != "off" && !w->options_.metrics_listen.empty()) {
    PIPEPLAN_ASSIGN_OR_RETURN(w->metrics_,
                              WorkerMetrics::Start(w->options_.metrics_listen, w->options_.job_id,
                                                   w->options_.worker_id));
  }
  return w;
}

absl::StatusOr<v1::Assignment> Worker::Register(const v1::WorkerInfo& info) {
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    absl::StatusOr<v1::Assignment> a = client_->RegisterWorker(options_.job_id, info);
    if (a.ok() || !Retryable(a.status()) || absl::Now() + backoff > deadline || stop_.load()) {
      return a;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

absl::Status Worker::Run() {
  const WorkerOptions& o = options_;
  const v1::WorkerInfo info = WorkerInfoFor(o);
  PIPEPLAN_ASSIGN_OR_RETURN(const v1::Assignment assignment, Register(info));
  ControlState state;
  state.SawVersion(assignment.plan_version());
  state.SetLease(absl::Seconds(std::max(0.3, assignment.lease_seconds())));
  Emit(absl::StrCat("event=registered job=", o.job_id, " worker=", o.worker_id,
                    " rank=", assignment.rank(), " plan_version=", assignment.plan_version()));

  ControlThreads threads(*client_, o, info, state);
  StepLoop loop(*client_, o, state, stop_, metrics_.get());
  const absl::Status result = loop.Run();
  threads.Stop();
  if (result.ok()) {
    Emit(absl::StrCat("event=done job=", o.job_id, " worker=", o.worker_id,
                      " steps=", loop.steps()));
  }
  return result;
}

}  // namespace pipeplan::worker
