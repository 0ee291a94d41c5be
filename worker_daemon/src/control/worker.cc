#include "pipeplan/worker/control/worker.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "active_plan.h"
#include "control_state.h"
#include "control_threads.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/retry_policy.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/env/event_log.h"
#include "pipeplan/worker/executors/executor_factory.h"
#include "pipeplan/worker/metrics/worker_metrics.h"
#include "pipeplan/worker/report/report_sender.h"
#include "pipeplan/worker/training/training_session.h"
#include "pipeplan/worker/transport/nccl_transport.h"
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
  info.set_run_id(ProcessRunId());
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
  w->planner_ = PlannerOverClient(*w->client_);
  if (w->options_.metrics_listen != "off" && !w->options_.metrics_listen.empty()) {
    PIPEPLAN_ASSIGN_OR_RETURN(w->metrics_,
                              WorkerMetrics::Start(w->options_.metrics_listen, w->options_.job_id,
                                                   w->options_.worker_id));
    w->metrics_->SetDeviceMemoryBytes(w->options_.memory_bytes);
  }
  return w;
}

absl::StatusOr<v1::Assignment> Worker::Register(const v1::WorkerInfo& info) {
  // A stop request ends the waits: the worker is shutting down.
  common::RetryEnv env;
  env.sleep = [this](absl::Duration d) {
    if (stop_.load()) return false;
    absl::SleepFor(d);
    return !stop_.load();
  };
  absl::StatusOr<v1::Assignment> assignment =
      common::RetryUntil(common::RetryPolicy{.initial_backoff = absl::Milliseconds(50)},
                         absl::Now() + options_.connect_timeout, env,
                         [&] { return planner_->RegisterWorker(options_.job_id, info); });
  // The request is made of the worker's flags (--device, --worker-id): a
  // usage error, exit 2, which the systemd unit does not restart.
  if (assignment.status().code() == absl::StatusCode::kInvalidArgument) {
    return common::UsageError(assignment.status().message());
  }
  return assignment;
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

  std::unique_ptr<TrainingSession> training;
  if (ExecutorKindOf(o).value_or(ExecutorKind::kSynthetic) == ExecutorKind::kTorch) {
    PIPEPLAN_ASSIGN_OR_RETURN(training, StartTraining());
    if (training->job_state() == v1::JOB_COMPLETED) return absl::OkStatus();
    // A new version's stages compile while the running version trains.
    state.OnNewVersion([t = training.get()](int64_t version) { t->Prepare(version); });
  }
  ReportSender reports(
      *planner_, o, [&state](int64_t version) { state.SawVersion(version); }, metrics_.get(),
      ProcessRunId());
  ControlThreads threads(*planner_, o, info, state);
  StepLoop loop(*planner_, o, state, stop_, metrics_.get(), training.get(), reports);
  absl::Status result = loop.Run();
  // Reports buffered during a planner outage go out before the worker says
  // it is done (bounded: a planner that stays away does not hold the exit).
  if (!state.JobDeleted() && !reports.Flush(2 * state.Lease() + absl::Seconds(5))) {
    Emit(absl::StrCat("event=reports_undelivered job=", o.job_id, " worker=", o.worker_id,
                      " reports=", reports.buffered()));
  }
  threads.Stop();
  if (loop.trained_to_the_end() || loop.left() || (training && IsJobFailure(result))) {
    // Done or leaving: the planner stops expecting heartbeats (it never
    // reports this worker lost), completes the job once every rank is done,
    // and replans without a worker that left.
    result = Finish({.steps = loop.steps(),
                     .plan_version = loop.plan_version(),
                     .leaving = loop.left(),
                     .whole_job = loop.whole_job_left()},
                    result);
  }
  if (result.ok() && loop.left()) {
    Emit(absl::StrCat("event=left job=", o.job_id, " worker=", o.worker_id,
                      " steps=", loop.steps()));
  } else if (result.ok()) {
    Emit(absl::StrCat("event=done job=", o.job_id, " worker=", o.worker_id,
                      " steps=", loop.steps()));
  }
  return result;
}

absl::StatusOr<std::unique_ptr<TrainingSession>> Worker::StartTraining() {
#ifdef PIPEPLAN_HAVE_TORCH
  absl::StatusOr<std::unique_ptr<TrainingSession>> training =
      StartTorchTraining(*planner_, options_);
  if (!training.ok()) return Finish({}, training.status());
  if ((*training)->job_state() == v1::JOB_FAILED) {
    // A restarted worker of a failed job stops instead of crash-looping.
    PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, planner_->GetJob(options_.job_id));
    return JobFailure(absl::FailedPreconditionError(
        absl::StrCat("job ", options_.job_id, " has failed: ", job.failure_message())));
  }
  return training;
#else
  return absl::FailedPreconditionError(
      "--executor torch: this pipeplan-worker was built without LibTorch");
#endif
}

absl::Status Worker::Finish(const Ending& ending, absl::Status result) {
  v1::FinishWorkerRequest request;
  request.set_job_id(options_.job_id);
  request.set_worker_id(options_.worker_id);
  request.set_step(ending.steps);
  request.set_plan_version(ending.plan_version);
  request.set_leaving(ending.leaving);
  request.set_whole_job(ending.whole_job);
  if (!result.ok()) request.set_error(std::string(result.message()));
  // Retried while the planner is away or cannot write (bounded).
  absl::StatusOr<v1::Job> job =
      common::RetryUntil(common::RetryPolicy{}, absl::Now() + options_.connect_timeout,
                         common::RetryEnv{}, [&] { return planner_->FinishWorker(request); });
  if (!job.ok()) {
    Emit(absl::StrCat("event=finish_unreported job=", options_.job_id,
                      " worker=", options_.worker_id,
                      " error=", absl::StatusCodeToString(job.status().code())));
  }
  return result;
}

}  // namespace pipeplan::worker
