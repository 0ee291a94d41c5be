#include "step_loop.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/worker/env/event_log.h"
#include "pipeplan/worker/env/peer_failure.h"
#include "pipeplan/worker/report/step_report.h"

namespace pipeplan::worker {
namespace {

// The training session's snapshot traffic on `a`'s transport settles before
// the transport goes away (however the version is dropped).
void ReleaseOnDisconnect(ActivePlan& a, TrainingSession* training) {
  a.on_disconnect = [training, t = a.transport.get()] { training->ReleaseTransport(t); };
}

// The device of the plan's transport rank `world` (StagePlan::WorldRank).
std::optional<std::string> DeviceOfWorldRank(const StagePlan& plan, int world) {
  if (plan.num_ranks <= 0 || world < 0) return std::nullopt;
  const size_t replica = world / plan.num_ranks, rank = world % plan.num_ranks;
  // A plan assembled by hand may list rank_devices only: one replica.
  const std::vector<std::string>* devices = replica < plan.replica_devices.size()
                                                ? &plan.replica_devices[replica]
                                            : replica == 0 ? &plan.rank_devices
                                                           : nullptr;
  if (devices == nullptr || rank >= devices->size()) return std::nullopt;
  return (*devices)[rank];
}

// Every device of the plan, in any replica.
std::vector<std::string> DevicesOf(const StagePlan& plan) {
  std::vector<std::string> devices = plan.rank_devices;
  for (const std::vector<std::string>& replica : plan.replica_devices) {
    for (const std::string& d : replica) {
      if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
    }
  }
  return devices;
}

}  // namespace

StepLoop::StepLoop(PlannerApi& planner, const WorkerOptions& options, ControlState& state,
                   const std::atomic<bool>& stop, WorkerMetrics* metrics, TrainingSession* training,
                   ReportSender& reports, Clock& clock, ConnectTransportFn connect)
    : planner_(planner),
      options_(options),
      clock_(clock),
      state_(state),
      stop_(stop),
      metrics_(metrics),
      kv_(&planner, options.job_id, clock),
      connect_(connect ? std::move(connect)
                       : RendezvousConnector(kv_, options_, clock_,
                                             [&state] { return state.Latest(); })),
      training_(training),
      reports_(reports),
      stall_watch_([&state] { return state.Latest(); },
                   [this](int64_t version) {
                     // On the watch thread: reads only the const options.
                     Emit(absl::StrCat("event=stall_abort job=", options_.job_id,
                                       " worker=", options_.worker_id, " plan_version=", version));
                   },
                   absl::Milliseconds(100), clock, [&state] { return state.LatestDevices(); }) {}

absl::Duration StepLoop::StallGrace() const {
  return std::max(state_.Lease(), 4 * last_step_time_);
}

StallWatch::Shrink StepLoop::ShrinkGrace(const StagePlan& plan) const {
  return {.devices = DevicesOf(plan), .grace = std::max(absl::Seconds(1), 4 * last_step_time_)};
}

StallWatch::Scope StepLoop::Watch(const ActivePlan& a) {
  return StallWatch::Scope(stall_watch_, a.transport.get(), a.version, StallGrace(),
                           ShrinkGrace(a.plan));
}

bool StepLoop::ReachedMaxSteps() const {
  return training_ && training_->spec().max_steps() > 0 && step_ >= training_->spec().max_steps();
}

absl::Status StepLoop::Run() {
  while (true) {
    const bool connected = active_ && active_->connected();
    if (state_.JobDeleted()) return JobGone();
    if (state_.JobCompleted() && !connected) {
      // Training ended on a version this worker had no rank in (a version
      // published as it reached max_steps never ran): nothing left to do.
      Emit(absl::StrCat("event=job_completed job=", options_.job_id, " worker=", options_.worker_id,
                        " step=", step_));
      trained_to_the_end_ = true;
      return absl::OkStatus();
    }
    if (stop_.load() && !connected) {
      Emit(absl::StrCat("event=leave job=", options_.job_id, " worker=", options_.worker_id,
                        " step=", step_, " connected=0"));
      left_ = true;
      return absl::OkStatus();
    }
    if (options_.steps > 0 && step_ >= options_.steps) {
      trained_to_the_end_ = true;
      return absl::OkStatus();
    }
    if (ReachedMaxSteps()) {
      trained_to_the_end_ = true;
      return absl::OkStatus();
    }
    int64_t want = state_.Latest();
    if (connected) {
      absl::StatusOr<Boundary> boundary;
      {
        const StallWatch::Scope watched = Watch(*active_);
        boundary = AgreeAtBoundary(want);
      }
      if (!boundary.ok()) {
        PIPEPLAN_RETURN_IF_ERROR(DropAfterFailure(boundary.status(), active_->version));
        continue;
      }
      if (boundary->leave) {
        if (Leave(*boundary)) return absl::OkStatus();
        continue;
      }
      want = boundary->version;
    }
    if (!active_ || active_->version != want) {
      if (absl::Status s = SwitchTo(want); !s.ok()) {
        PIPEPLAN_RETURN_IF_ERROR(DropAfterFailure(s, want));
      }
      continue;  // agree again on the new transport before running
    }
    if (absl::Status s = RunOneStep(); !s.ok()) {
      PIPEPLAN_RETURN_IF_ERROR(DropAfterFailure(s, active_ ? active_->version : want));
    }
  }
}

absl::Status StepLoop::JobGone() {
  // Cancelled and deleted jobs both end the watch NOT_FOUND; a cancelled one
  // is still there to ask, and its message says why ("cancelled: REASON").
  absl::StatusOr<v1::Job> job = planner_.GetJob(options_.job_id);
  if (job.ok() && job->state() == v1::JOB_CANCELLED) {
    return absl::NotFoundError(
        absl::StrCat("job ", options_.job_id, " was cancelled (", job->failure_message(), ")"));
  }
  return absl::NotFoundError(absl::StrCat("job ", options_.job_id, " was deleted"));
}

absl::Status StepLoop::DropAfterFailure(const absl::Status& error, int64_t version) {
  if (!PeerFailure(error)) return error;
  ReportFailure(version);
  // Closing the transport fails the ranks still blocked on this one, so the
  // whole pipeline drops the step within one communication round.
  active_.reset();
  if (metrics_) metrics_->CountDroppedStep();
  Emit(absl::StrCat("event=step_dropped job=", options_.job_id, " worker=", options_.worker_id,
                    " step=", step_, " plan_version=", version,
                    " code=", absl::StatusCodeToString(error.code()), " error=\"",
                    absl::CHexEscape(error.message()), "\""));
  // The planner replans without a lost device once its lease runs out; a
  // peer that restarted in place comes back in this same version.
  WaitForNewerVersion(version, clock_.Now() + 2 * state_.Lease() + absl::Seconds(1));
  return absl::OkStatus();
}

void StepLoop::ReportFailure(int64_t version) {
  ControlState::PeerFailureReport report{.version = version};
  if (active_ && active_->transport && active_->version == version) {
    for (int peer : active_->transport->UnreachablePeers()) {
      std::optional<std::string> device = DeviceOfWorldRank(active_->plan, peer);
      if (device) report.unreachable.push_back(*std::move(device));
    }
  }
  state_.ReportPeerFailure(std::move(report));
}

void StepLoop::WaitForNewerVersion(int64_t version, absl::Time deadline) {
  while (!stop_.load() && !state_.JobDeleted() && !state_.JobCompleted() &&
         state_.Latest() <= version && clock_.Now() < deadline) {
    if (state_.SleepOrShutdown(absl::Milliseconds(50))) break;
  }
}

bool StepLoop::Leave(const Boundary& boundary) {
  const int64_t version = active_->version;
  // Every rank saves this step (the checkpoint's barriers span the ranks of
  // replica 0, which alone writes): the ranks that stay resume from it on
  // the next version instead of from an older checkpoint.
  if (training_ && active_->replica == 0) {
    const StallWatch::Scope watched = Watch(*active_);
    absl::Status saved = training_->CheckpointNow(*active_->executor, version, step_);
    if (!saved.ok()) {
      // They fall back to the newest checkpoint there is.
      Emit(absl::StrCat("event=checkpoint_failed job=", options_.job_id,
                        " worker=", options_.worker_id, " step=", step_,
                        " code=", absl::StatusCodeToString(saved.code())));
    }
  }
  // This rank closes its transport of `version` alive: a peer that sees the
  // sockets close and names it must not make the planner declare it lost.
  state_.ReportPeerFailure({.version = version});
  Emit(absl::StrCat(boundary.mine ? "event=leave" : "event=peer_left", " job=", options_.job_id,
                    " worker=", options_.worker_id, " step=", step_, " plan_version=", version,
                    " everyone=", boundary.everyone ? 1 : 0));
  if (boundary.mine) {
    left_ = true;
    whole_job_left_ = boundary.everyone;
    return true;
  }
  // The running version lost a rank: drop it (its transport included) and
  // wait for the version the planner publishes when the leaver tells it; as
  // after a failure, the same version is tried again after two leases.
  active_.reset();
  WaitForNewerVersion(version, clock_.Now() + 2 * state_.Lease() + absl::Seconds(1));
  return false;
}

absl::StatusOr<StepLoop::Boundary> StepLoop::AgreeAtBoundary(int64_t known_version) {
  Transport& transport = *active_->transport;
  absl::StatusOr<int64_t> agreed = transport.AllReduceMax(known_version, options_.comm_timeout);
  if (!agreed.ok()) {
    return absl::Status(agreed.status().code(),
                        absl::StrCat("agreeing on the plan version at step ", step_, ": ",
                                     agreed.status().message()));
  }
  state_.SawVersion(*agreed);
  Boundary boundary{.version = *agreed};
  if (training_ && *agreed != active_->version) {
    // Switch once every rank has the new version's stages compiled; until
    // then the running version keeps training. A rank that is slower to
    // compile holds the switch back for all.
    training_->Prepare(*agreed);
    PIPEPLAN_ASSIGN_OR_RETURN(
        const int64_t compiling,
        transport.AllReduceMax(training_->Prepared(*agreed) ? 0 : 1, options_.comm_timeout));
    if (compiling != 0) boundary.version = active_->version;
  }
  // A stop (SIGTERM) makes its rank leave at this boundary; read once, so
  // this rank's vote and its part agree.
  const bool stopping = stop_.load();
  PIPEPLAN_ASSIGN_OR_RETURN(const int64_t leave_vote,
                            transport.AllReduceMax(stopping ? 1 : 0, options_.comm_timeout));
  if (leave_vote != 0) {
    // Only when someone leaves: does anyone stay?
    PIPEPLAN_ASSIGN_OR_RETURN(const int64_t stay_vote,
                              transport.AllReduceMax(stopping ? 0 : 1, options_.comm_timeout));
    boundary.leave = true;
    boundary.mine = stopping;
    boundary.everyone = stay_vote == 0;
  }
  return boundary;
}

absl::Status StepLoop::SwitchTo(int64_t version) {
  const int64_t from = active_ ? active_->version : 0;
  const absl::Time start = clock_.Now();
  // The previous version stays until training state has moved out of it.
  if (active_) state_.ReportPeerFailure({.version = active_->version});  // closed alive, as above
  std::unique_ptr<ActivePlan> previous = active_ ? std::move(active_) : std::move(held_);
  if (previous) previous->Disconnect();
  absl::StatusOr<std::unique_ptr<ActivePlan>> next =
      BuildActivePlan(planner_, connect_, options_, version, training_, clock_);
  if (!next.ok() && previous && previous->executor && PeerFailure(next.status())) {
    // No step ran since the boundary every rank agreed at: its state is
    // whole, and the next version (the one that superseded this one during
    // its rendezvous, or this one rebuilt) moves it instead of rolling
    // every rank back to a checkpoint.
    held_ = std::move(previous);
  }
  if (next.ok() && training_ && (*next)->rank >= 0) {
    ReleaseOnDisconnect(**next, training_);
    if (absl::Status s = ResumeInto(**next, previous.get()); !s.ok()) next = s;
  }
  previous.reset();
  if (!next.ok()) {
    absl::Status s(next.status().code(), absl::StrCat("switching to plan version ", version, ": ",
                                                      next.status().message()));
    if (IsJobFailure(next.status())) s = JobFailure(std::move(s));
    return s;
  }
  active_ = std::move(*next);
  const double switch_seconds = absl::ToDoubleSeconds(clock_.Now() - start);
  std::string costs;
  unreported_switch_.reset();
  if (active_->rank >= 0) unreported_switch_ = SwitchPause{.seconds = switch_seconds};
  if (training_ && active_->rank >= 0) {
    const SwitchCost c = training_->LastSwitchCost();
    unreported_switch_->compile_wait_seconds = c.compile_wait_seconds;
    costs = absl::StrCat(" switch_seconds=", switch_seconds, " compile_seconds=", c.compile_seconds,
                         " compile_wait_seconds=", c.compile_wait_seconds,
                         " state_move_seconds=", c.state_move_seconds);
    if (metrics_) metrics_->ObserveSwitch(c.compile_seconds, switch_seconds);
  }
  if (metrics_) metrics_->SetPlanVersion(version);
  ProbeAllReduceOnce();
  const StagePlan& plan = active_->plan;
  Emit(absl::StrCat("event=plan_switch job=", options_.job_id, " worker=", options_.worker_id,
                    " from_version=", from, " plan_version=", version, " rank=", active_->rank,
                    " replica=", active_->replica, " ranks=", plan.num_ranks,
                    " replicas=", plan.num_replicas, " stages=", plan.num_stages,
                    " microbatches=", plan.num_microbatches,
                    " schedule=", std::string(schedule::ScheduleKindName(plan.schedule)),
                    " step=", step_, costs));
  if (active_->rank < 0) {
    WaitForVersionAfter(version);
    active_.reset();
  }
  return absl::OkStatus();
}

void StepLoop::ProbeAllReduceOnce() {
  ActivePlan& a = *active_;
  if (training_ == nullptr || a.rank < 0 || a.pipeline == nullptr || a.pipeline->size() < 2 ||
      a.pipeline->name() != "gloo" || options_.allreduce_probe_bytes <= 0) {
    return;
  }
  // Watched like a step: a peer lost during the probe ends it when the
  // planner replans, not after the comm timeout.
  const StallWatch::Scope watched = Watch(a);
  absl::StatusOr<AllReduceProbe> probe =
      ProbeAllReduce(*a.pipeline, options_.allreduce_probe_bytes, static_cast<uint64_t>(a.version),
                     options_.comm_timeout);
  if (!probe.ok()) {
    Emit(absl::StrCat("event=allreduce_probe_failed job=", options_.job_id,
                      " worker=", options_.worker_id, " plan_version=", a.version, " error=\"",
                      probe.status().message(), "\""));
    return;
  }
  a.allreduce_probe = *probe;
}

absl::Status StepLoop::ResumeInto(ActivePlan& a, const ActivePlan* previous) {
  const bool held = previous && previous->executor;
  const ExecutorPlace place{.rank = a.rank,
                            .replica = a.replica,
                            .pipeline = a.pipeline.get(),
                            .replica_group = a.replica_group.get()};
  const StallWatch::Scope watched = Watch(a);
  PIPEPLAN_ASSIGN_OR_RETURN(step_, training_->Resume(a.plan, place, *a.transport, *a.executor,
                                                     held ? previous->executor.get() : nullptr,
                                                     held ? &previous->plan : nullptr, step_));
  return absl::OkStatus();
}

void StepLoop::WaitForVersionAfter(int64_t version) {
  while (!stop_.load() && !state_.JobDeleted() && !state_.JobCompleted() &&
         state_.Latest() <= version) {
    if (state_.SleepOrShutdown(absl::Milliseconds(100))) break;
  }
}

void StepLoop::ObserveStep(const StepResult& r, double peak_memory, std::optional<double> loss,
                           std::optional<double> exposed) {
  if (!metrics_) return;
  metrics_->ObserveStep(r.step_seconds);
  metrics_->SetStepBreakdown(r.compute_seconds, r.comm_seconds, BubbleRatio(r), peak_memory);
  metrics_->SetOptimizerSeconds(r.optimizer_seconds);
  if (exposed) metrics_->SetAllReduceExposedSeconds(*exposed);
  if (loss) metrics_->SetLoss(*loss);
  if (active_->samples_per_step > 0 && r.step_seconds > 0) {
    metrics_->SetSamplesPerSecond(static_cast<double>(active_->samples_per_step) / r.step_seconds);
  }
}

absl::Status StepLoop::RunOneStep() {
  absl::StatusOr<StepResult> run;
  {
    const StallWatch::Scope watched = Watch(*active_);
    const absl::Time start = clock_.Now();
    run = active_->runtime->RunStep(step_, *active_->pipeline, *active_->executor);
    last_step_time_ = clock_.Now() - start;
  }
  if (!run.ok()) {
    // A diverged loss is final for the job; anything else (a peer that went
    // away) a restart may fix.
    if (training_ && run.status().code() == absl::StatusCode::kOutOfRange) {
      return JobFailure(run.status());
    }
    return run.status();
  }
  const StepResult& r = *run;
  const std::optional<double> loss = active_->executor->LastLoss();
  const double peak_memory = active_->executor->PeakMemoryBytes();
  v1::ReportStepRequest report = MakeStepReport(options_, active_->version, r, peak_memory, loss);
  report.set_peak_memory_source(active_->executor->PeakMemorySource());
  report.set_replica(active_->replica);
  const std::optional<double> exposed = active_->executor->LastExposedAllReduceSeconds();
  if (exposed) report.set_allreduce_exposed_seconds(*exposed);
  if (active_->cpu_use) *report.mutable_cpu_use() = *active_->cpu_use;
  if (active_->allreduce_probe) {
    report.set_allreduce_probe_seconds(active_->allreduce_probe->seconds);
    report.set_allreduce_probe_bytes(active_->allreduce_probe->bytes);
  }
  report.set_weight_pass_repeats_backward(active_->executor->WeightPassRepeatsBackward());
  if (unreported_switch_) {
    report.set_switch_seconds(unreported_switch_->seconds);
    report.set_switch_compile_wait_seconds(unreported_switch_->compile_wait_seconds);
    unreported_switch_.reset();
  }
  const std::string report_result = reports_.Add(std::move(report));
  ObserveStep(r, peak_memory, loss, exposed);
  Emit(absl::StrCat("event=step job=", options_.job_id, " worker=", options_.worker_id,
                    " step=", step_, " plan_version=", active_->version, " rank=", active_->rank,
                    " replica=", active_->replica, " seconds=", r.step_seconds,
                    " report=", report_result,
                    // Every digit, so a check against a reference can compare bit for bit.
                    loss ? absl::StrFormat(" loss=%.17g", *loss) : std::string()));
  ++step_;
  last_version_ = active_->version;
  return FinishStep();
}

absl::Status StepLoop::FinishStep() {
  if (!training_) return absl::OkStatus();
  const StallWatch::Scope watched = Watch(*active_);
  PIPEPLAN_RETURN_IF_ERROR(training_->AfterStep(*active_->executor, step_));
  // Replicas hold the same state: replica 0 alone writes checkpoints.
  if (active_->replica != 0) return absl::OkStatus();
  absl::Status saved = training_->MaybeCheckpoint(*active_->executor, active_->version, step_);
  if (saved.code() == absl::StatusCode::kInternal ||
      saved.code() == absl::StatusCode::kResourceExhausted) {
    // Every rank saw the same failed shard or manifest (the checkpoint's
    // barriers say so): training goes on and the next checkpoint tries again.
    Emit(absl::StrCat("event=checkpoint_failed job=", options_.job_id,
                      " worker=", options_.worker_id, " step=", step_,
                      " code=", absl::StatusCodeToString(saved.code())));
    return absl::OkStatus();
  }
  return saved;
}

}  // namespace pipeplan::worker
