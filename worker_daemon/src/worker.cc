#include "pipeplan/worker/worker.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "pipeplan/core/schedule/action.h"
#include "pipeplan/core/status_macros.h"
#include "pipeplan/worker/executor.h"
#include "pipeplan/worker/gloo_transport.h"
#include "pipeplan/worker/metrics.h"
#include "pipeplan/worker/mlp_executor.h"
#include "pipeplan/worker/nccl_transport.h"
#include "pipeplan/worker/rendezvous.h"
#include "pipeplan/worker/runtime.h"
#include "pipeplan/worker/stage_plan.h"
#include "pipeplan/worker/synthetic_executor.h"

namespace pipeplan::worker {
namespace {

bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

// One line per event on stdout, key=value, flushed (tests and operators read it).
void Emit(const std::string& line) {
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

// Shared between Run and its watch and heartbeat threads.
struct Worker::State {
  absl::Mutex mu;
  int64_t latest_version ABSL_GUARDED_BY(mu) = 0;
  bool job_deleted ABSL_GUARDED_BY(mu) = false;
  bool shutting_down ABSL_GUARDED_BY(mu) = false;
  client::PlanWatch* watch ABSL_GUARDED_BY(mu) = nullptr;
  absl::Duration lease ABSL_GUARDED_BY(mu) = absl::Seconds(10);

  void SawVersion(int64_t v) {
    absl::MutexLock l(&mu);
    latest_version = std::max(latest_version, v);
  }
  int64_t Latest() {
    absl::MutexLock l(&mu);
    return latest_version;
  }
  bool Deleted() {
    absl::MutexLock l(&mu);
    return job_deleted;
  }
  // Sleeps up to `d`; true when shutting down.
  bool SleepOrShutdown(absl::Duration d) {
    absl::MutexLock l(&mu);
    mu.AwaitWithTimeout(absl::Condition(&shutting_down), d);
    return shutting_down;
  }
};

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
  if (options.executor != "synthetic" && options.executor != "mlp") {
    return absl::InvalidArgumentError(
        absl::StrCat("--executor must be synthetic or mlp, got \"", options.executor, "\""));
  }
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

absl::Status Worker::Run() {
  State state;
  const WorkerOptions& o = options_;
  client::PlannerClient& planner = *client_;

  v1::WorkerInfo info;
  info.set_worker_id(o.worker_id);
  info.set_host(o.listen_host);
  info.set_device_id(o.device_id);
  info.set_memory_bytes(o.memory_bytes);
  info.set_transport_address(absl::StrCat(o.transport, "://", o.listen_host));
  auto register_worker = [&]() -> absl::StatusOr<v1::Assignment> {
    const absl::Time deadline = absl::Now() + o.connect_timeout;
    absl::Duration backoff = absl::Milliseconds(50);
    while (true) {
      absl::StatusOr<v1::Assignment> a = planner.RegisterWorker(o.job_id, info);
      if (a.ok() || !Retryable(a.status()) || absl::Now() + backoff > deadline || stop_.load()) {
        return a;
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(2));
    }
  };
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Assignment assignment, register_worker());
  state.SawVersion(assignment.plan_version());
  {
    absl::MutexLock l(&state.mu);
    state.lease = absl::Seconds(std::max(0.3, assignment.lease_seconds()));
  }
  Emit(absl::StrCat("event=registered job=", o.job_id, " worker=", o.worker_id,
                    " rank=", assignment.rank(), " plan_version=", assignment.plan_version()));

  // Watch thread: keeps a WatchPlan stream open, reconnecting with backoff.
  std::thread watcher([&] {
    absl::Duration backoff = absl::Milliseconds(100);
    while (true) {
      v1::WatchPlanRequest req;
      req.set_job_id(o.job_id);
      req.set_worker_id(o.worker_id);
      req.set_known_version(state.Latest());
      std::unique_ptr<client::PlanWatch> watch = planner.WatchPlan(req);
      {
        absl::MutexLock l(&state.mu);
        if (state.shutting_down) break;
        state.watch = watch.get();
      }
      v1::PlanUpdate update;
      while (watch->Next(&update)) {
        state.SawVersion(update.version());
        backoff = absl::Milliseconds(100);
      }
      absl::Status s = watch->Finish();
      {
        absl::MutexLock l(&state.mu);
        state.watch = nullptr;
        if (state.shutting_down) break;
        if (s.code() == absl::StatusCode::kNotFound && !absl::StrContains(s.message(), "worker")) {
          state.job_deleted = true;
          break;
        }
      }
      if (state.SleepOrShutdown(backoff)) break;
      backoff = std::min(backoff * 2, absl::Seconds(2));
    }
  });
  // Heartbeat thread: renews the lease; re-registers when the planner forgot us.
  std::thread heart([&] {
    while (true) {
      absl::Duration lease;
      {
        absl::MutexLock l(&state.mu);
        lease = state.lease;
      }
      if (state.SleepOrShutdown(lease / 3)) break;
      absl::StatusOr<v1::HeartbeatResponse> hb = planner.Heartbeat(o.job_id, o.worker_id);
      if (hb.ok()) {
        state.SawVersion(hb->current_plan_version());
      } else if (hb.status().code() == absl::StatusCode::kNotFound) {
        if (absl::StrContains(hb.status().message(), "not registered")) {
          (void)planner.RegisterWorker(o.job_id, info);
        } else {
          absl::MutexLock l(&state.mu);
          state.job_deleted = true;
        }
      }
    }
  });
  auto stop_threads = [&] {
    {
      absl::MutexLock l(&state.mu);
      state.shutting_down = true;
      if (state.watch) state.watch->Cancel();
    }
    watcher.join();
    heart.join();
  };

  // The running plan version.
  struct Active {
    int64_t version = 0;
    StagePlan plan;
    int rank = -1;
    std::unique_ptr<Transport> transport;
    std::unique_ptr<StageRuntime> runtime;
    std::unique_ptr<Executor> executor;
  };
  std::unique_ptr<Active> active;
  PlannerKeyValue kv(&planner, o.job_id);

  auto build = [&](int64_t version) -> absl::StatusOr<std::unique_ptr<Active>> {
    absl::StatusOr<v1::VersionedPlan> vp;
    for (int attempt = 0; attempt < 50; ++attempt) {
      vp = planner.GetPlan(o.job_id, version);
      if (vp.ok() || !Retryable(vp.status())) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (!vp.ok()) return vp.status();
    auto a = std::make_unique<Active>();
    a->version = version;
    PIPEPLAN_ASSIGN_OR_RETURN(a->plan,
                              StagePlanFromProto(vp->plan(), version, &vp->request().graph()));
    a->rank = a->plan.RankOf(o.device_id);
    if (a->rank < 0) return a;
    const std::string prefix = absl::StrCat("v", version, "/", o.transport, "/");
    if (o.transport == "nccl") {
      PIPEPLAN_ASSIGN_OR_RETURN(a->transport, ConnectNccl({.rank = a->rank,
                                                           .size = a->plan.ranks,
                                                           .device_ordinal = -1,
                                                           .timeout = o.connect_timeout},
                                                          kv, prefix));
    } else {
      GlooKeyValueStore store(&kv, prefix, o.connect_timeout);
      PIPEPLAN_ASSIGN_OR_RETURN(a->transport, ConnectGloo({.rank = a->rank,
                                                           .size = a->plan.ranks,
                                                           .host = o.listen_host,
                                                           .timeout = o.comm_timeout},
                                                          store));
    }
    RuntimeOptions ro;
    ro.rank = a->rank;
    ro.num_stages = a->plan.num_stages;
    ro.num_microbatches = a->plan.microbatches;
    ro.stage_to_rank = a->plan.lowered.stage_to_rank;
    ro.comm_timeout = o.comm_timeout;
    PIPEPLAN_ASSIGN_OR_RETURN(StageRuntime runtime,
                              StageRuntime::Create(ro, a->plan.lowered.programs[a->rank]));
    a->runtime = std::make_unique<StageRuntime>(std::move(runtime));
    if (o.executor == "mlp") {
      if (a->plan.stage_nodes.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("plan version ", version, " has no graph to build the mlp from"));
      }
      MlpOptions mo;
      mo.layers = LayersFromGraph(vp->request().graph());
      mo.stage_layers = a->plan.stage_nodes;
      for (int s = 0; s < a->plan.num_stages; ++s) {
        if (ro.stage_to_rank[s] == a->rank) mo.local_stages.push_back(s);
      }
      mo.num_microbatches = a->plan.microbatches;
      mo.width = o.mlp_width;
      mo.rows = o.mlp_rows;
      mo.learning_rate = o.mlp_learning_rate;
      a->executor = std::make_unique<MlpExecutor>(std::move(mo));
    } else {
      SyntheticOptions so;
      so.forward_seconds = a->plan.forward_seconds;
      so.backward_seconds = a->plan.backward_seconds;
      so.boundary_bytes = a->plan.boundary_bytes;
      so.time_scale = o.time_scale;
      so.time_factor = a->plan.time_factor;
      so.slowdown = o.slowdown;
      so.max_message_bytes = o.max_message_bytes;
      a->executor = std::make_unique<SyntheticExecutor>(std::move(so));
    }
    return a;
  };

  absl::Status result = absl::OkStatus();
  int64_t step = 0;
  while (true) {
    if (stop_.load() && !(active && active->transport)) break;
    if (state.Deleted()) {
      result = absl::NotFoundError(absl::StrCat("job ", o.job_id, " was deleted"));
      break;
    }
    if (o.steps > 0 && step >= o.steps) break;
    int64_t want = state.Latest();
    if (active && active->transport) {
      absl::StatusOr<int64_t> agreed = active->transport->AllReduceMax(want, o.comm_timeout);
      if (!agreed.ok()) {
        result = absl::Status(agreed.status().code(),
                              absl::StrCat("agreeing on the plan version at step ", step, ": ",
                                           agreed.status().message()));
        break;
      }
      want = *agreed;
      state.SawVersion(want);
      // A stop (SIGTERM) on any rank stops every rank at this boundary.
      absl::StatusOr<int64_t> stop_vote =
          active->transport->AllReduceMax(stop_.load() ? 1 : 0, o.comm_timeout);
      if (!stop_vote.ok()) {
        result = stop_vote.status();
        break;
      }
      if (*stop_vote != 0) {
        Emit(absl::StrCat("event=stop job=", o.job_id, " worker=", o.worker_id, " step=", step));
        break;
      }
    }
    if (!active || active->version != want) {
      const int64_t from = active ? active->version : 0;
      active.reset();
      absl::StatusOr<std::unique_ptr<Active>> next = build(want);
      if (!next.ok()) {
        result = absl::Status(next.status().code(), absl::StrCat("switching to plan version ", want,
                                                                 ": ", next.status().message()));
        break;
      }
      active = std::move(*next);
      if (metrics_) metrics_->SetPlanVersion(want);
      Emit(absl::StrCat("event=plan_switch job=", o.job_id, " worker=", o.worker_id,
                        " from_version=", from, " plan_version=", want, " rank=", active->rank,
                        " ranks=", active->plan.ranks, " stages=", active->plan.num_stages,
                        " microbatches=", active->plan.microbatches,
                        " schedule=", std::string(schedule::ScheduleKindName(active->plan.kind)),
                        " step=", step));
      if (active->rank < 0) {
        // No stage for this device in this version: wait for the next one.
        while (!stop_.load() && !state.Deleted() && state.Latest() <= want) {
          if (state.SleepOrShutdown(absl::Milliseconds(100))) break;
        }
        active.reset();
      }
      continue;  // agree again on the new transport before running
    }

    absl::StatusOr<StepResult> r =
        active->runtime->RunStep(step, *active->transport, *active->executor);
    if (!r.ok()) {
      result = r.status();
      break;
    }
    v1::ReportStepRequest report;
    report.set_job_id(o.job_id);
    report.set_worker_id(o.worker_id);
    report.set_step(step);
    report.set_plan_version(active->version);
    report.set_step_seconds(r->step_seconds);
    report.set_peak_memory_bytes(active->executor->PeakMemoryBytes());
    for (const ActionTime& t : r->timings) {
      v1::ActionTiming* at = report.add_timings();
      at->set_action(schedule::ActionToString(t.action));
      at->set_seconds(t.seconds);
    }
    std::string report_result = "ok";
    for (int attempt = 0; attempt < 3; ++attempt) {
      absl::StatusOr<v1::ReportStepResponse> resp = planner.ReportStep(report);
      if (resp.ok()) {
        state.SawVersion(resp->current_plan_version());
        break;
      }
      report_result = std::string(absl::StatusCodeToString(resp.status().code()));
      if (resp.status().code() == absl::StatusCode::kFailedPrecondition) {
        // Stale version: learn the current one; the next boundary switches.
        absl::StatusOr<v1::HeartbeatResponse> hb = planner.Heartbeat(o.job_id, o.worker_id);
        if (hb.ok()) state.SawVersion(hb->current_plan_version());
        break;
      }
      if (!Retryable(resp.status())) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    const std::optional<double> loss = active->executor->LastLoss();
    if (metrics_) {
      metrics_->ObserveStep(r->step_seconds);
      if (loss) metrics_->SetLoss(*loss);
    }
    Emit(absl::StrCat("event=step job=", o.job_id, " worker=", o.worker_id, " step=", step,
                      " plan_version=", active->version, " rank=", active->rank,
                      " seconds=", r->step_seconds, " report=", report_result,
                      loss ? absl::StrCat(" loss=", *loss) : std::string()));
    ++step;
  }
  stop_threads();
  if (result.ok()) {
    Emit(absl::StrCat("event=done job=", o.job_id, " worker=", o.worker_id, " steps=", step));
  }
  return result;
}

}  // namespace pipeplan::worker
