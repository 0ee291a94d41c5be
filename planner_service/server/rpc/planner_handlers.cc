#include "pipeplan/server/rpc/planner_handlers.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/server/base/release_memory.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/obs/metrics.h"
#include "pipeplan/server/replan/job_observer.h"
#include "pipeplan/server/replan/live_devices.h"
#include "pipeplan/server/replan/version_prediction.h"
#include "pipeplan/server/rpc/report_guard.h"
#include "pipeplan/server/rpc/training_spec.h"

namespace pipeplan::server {
namespace {

// Solves estimated at this much or more return their memory to the OS.
constexpr int64_t kReleaseAfterSolveBytes = int64_t{64} << 20;

int SolverThreads(int requested) {
  if (requested > 0) return requested;
  return std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
}

ReplanPolicyOptions ReplanOptions(const HandlerOptions& o) {
  ReplanPolicyOptions r = o.replan;
  r.limits = o.limits;
  return r;
}

}  // namespace

PlannerHandlers::PlannerHandlers(HandlerOptions options, Store* store, const Clock* clock,
                                 Metrics* metrics)
    : options_(std::move(options)),
      clock_(clock),
      metrics_(metrics),
      cache_(options_.cache, clock),
      registry_(store, clock, options_.registry, metrics),
      budget_(options_.solve_memory_bytes),
      pool_(SolverThreads(options_.solver_threads), std::max(options_.max_concurrent_solves, 1)),
      policy_(&registry_, &pool_, clock, ReplanOptions(options_), metrics, &budget_) {
  if (metrics_) {
    pool_.SetObserver([m = metrics_](int running, int queued) { m->SetSolves(running, queued); });
  }
}

PlannerHandlers::~PlannerHandlers() { Shutdown(); }

void PlannerHandlers::Shutdown() {
  registry_.CloseAllWatchers(absl::OkStatus());
  pool_.Shutdown();
}

absl::Status PlannerHandlers::CheckLimits(const v1::PlanRequest& request) const {
  auto over = [](absl::string_view field, int64_t count, absl::string_view flag, int64_t limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat(field, " has ", count, " entries, over the limit --", flag, "=", limit));
  };
  if (static_cast<size_t>(request.graph().nodes_size()) > options_.limits.max_nodes) {
    return over("graph.nodes", request.graph().nodes_size(), "max-nodes",
                static_cast<int64_t>(options_.limits.max_nodes));
  }
  if (static_cast<size_t>(request.graph().edges_size()) > options_.limits.max_edges) {
    return over("graph.edges", request.graph().edges_size(), "max-edges",
                static_cast<int64_t>(options_.limits.max_edges));
  }
  if (request.cluster().devices_size() > options_.max_cluster_devices) {
    return over("cluster.devices", request.cluster().devices_size(), "max-devices",
                options_.max_cluster_devices);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> PlannerHandlers::ReserveMemory(
    const v1::PlanRequest& request, int64_t request_bytes) {
  if (request_bytes < 0) request_bytes = static_cast<int64_t>(request.ByteSizeLong());
  return budget_.TryReserve(EstimateSolveBytes(request, request_bytes));
}

void PlannerHandlers::PublishSolveGauges() {
  if (metrics_) metrics_->SetSolves(pool_.running(), pool_.queued());
}

absl::StatusOr<v1::Plan> PlannerHandlers::Solve(const v1::PlanRequest& request,
                                                const CallContext& ctx, bool fit_to_devices) {
  if (ctx.cancelled->load()) return absl::CancelledError("the call was cancelled before solving");
  const absl::Time start = clock_->Now();
  if (start >= ctx.deadline) {
    return absl::DeadlineExceededError("the deadline passed before the solve started");
  }
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, PlanInputs::FromRequest(request, options_.limits));
  if (fit_to_devices) FitToDevices(in);
  in.options.deadline = std::min(in.options.deadline, ctx.deadline - options_.deadline_margin);
  in.options.cancelled = ctx.cancelled.get();
  const absl::Time solve_start = absl::Now();
  absl::StatusOr<PlanResult> result = MakePlan(*in.graph, *in.cluster, in.options);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - solve_start);
  if (ctx.cancelled->load()) return absl::CancelledError("the call was cancelled during the solve");
  if (!result.ok()) {
    if (result.status().code() == absl::StatusCode::kDeadlineExceeded ||
        absl::Now() >= ctx.deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no plan within the call's deadline: ", result.status().message()));
    }
    return result.status();
  }
  if (metrics_) metrics_->ObserveSolve(seconds, result->gap);
  return PlanToProto(*in.graph, *in.cluster, *result);
}

template <typename T>
void PlannerHandlers::SubmitSolve(std::shared_ptr<MemoryBudget::Reservation> memory,
                                  std::function<absl::StatusOr<T>()> solve, Callback<T> done) {
  absl::Status admitted =
      pool_.Submit([this, solve = std::move(solve), done, memory = std::move(memory)]() mutable {
        done(solve());
        solve = nullptr;  // the request copies go before the memory they were counted in
        AfterSolve(std::move(memory));
      });
  if (!admitted.ok()) return done(admitted);
  PublishSolveGauges();
}

void PlannerHandlers::HandlePlan(const v1::PlanRequest& request, const CallContext& ctx,
                                 Callback<v1::Plan> done) {
  if (absl::Status s = CheckLimits(request); !s.ok()) return done(s);
  auto key = std::make_shared<std::string>(CanonicalBytes(request));
  if (auto hit = cache_.Lookup(*key)) {
    if (metrics_) metrics_->CountCache(true);
    return done(v1::Plan(**hit));
  }
  if (metrics_) metrics_->CountCache(false);
  absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> memory =
      ReserveMemory(request, static_cast<int64_t>(key->size()));
  if (!memory.ok()) return done(memory.status());
  // The request is copied: the caller's message may not outlive this call.
  auto req = std::make_shared<v1::PlanRequest>(request);
  // Only answers solved under the request's own time limit (not cut short by
  // the call's deadline) are cached.
  const double limit =
      request.options().time_limit_seconds() > 0 ? request.options().time_limit_seconds() : 10.0;
  const bool cacheable =
      ctx.deadline - clock_->Now() > absl::Seconds(limit) + options_.deadline_margin;
  SubmitSolve<v1::Plan>(
      *std::move(memory),
      [this, req, key, ctx, cacheable]() {
        absl::StatusOr<v1::Plan> plan = Solve(*req, ctx);
        if (plan.ok() && cacheable) cache_.Insert(*key, std::make_shared<const v1::Plan>(*plan));
        return plan;
      },
      std::move(done));
}

void PlannerHandlers::HandleCreateJob(const v1::CreateJobRequest& request, const CallContext& ctx,
                                      Callback<v1::Job> done) {
  if (absl::Status s = CheckLimits(request.request()); !s.ok()) return done(s);
  if (request.name().size() > 256) {
    return done(absl::InvalidArgumentError("name is longer than 256 bytes"));
  }
  absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> memory =
      ReserveMemory(request.request());
  if (!memory.ok()) return done(memory.status());
  auto req = std::make_shared<v1::CreateJobRequest>(request);
  if (absl::Status s = ApplyTrainingSpec(req->training(), req->mutable_request()); !s.ok()) {
    return done(s);
  }
  SubmitSolve<v1::Job>(
      *std::move(memory),
      [this, req, ctx]() -> absl::StatusOr<v1::Job> {
        PIPEPLAN_ASSIGN_OR_RETURN(v1::Plan plan, Solve(req->request(), ctx));
        return registry_.CreateJob(req->name(), req->request(), plan, req->training());
      },
      std::move(done));
}

void PlannerHandlers::HandleReplanJob(const v1::ReplanJobRequest& request, const CallContext& ctx,
                                      Callback<v1::VersionedPlan> done) {
  absl::StatusOr<v1::VersionedPlan> current = registry_.GetPlan(request.job_id(), 0);
  if (!current.ok()) return done(current.status());
  auto req = std::make_shared<v1::PlanRequest>(current->request());
  if (request.has_options()) {
    *req->mutable_options() = request.options();
    // The new options plan the same training: its batch, optimizer and dtype.
    absl::StatusOr<v1::Job> job = registry_.GetJob(request.job_id());
    if (!job.ok()) return done(job.status());
    if (job->training().ByteSizeLong() > 0) {
      if (absl::Status s = ApplyTrainingSpec(job->training(), req.get()); !s.ok()) return done(s);
    }
  }
  absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> memory = ReserveMemory(*req);
  if (!memory.ok()) return done(memory.status());
  auto job_id = std::make_shared<std::string>(request.job_id());
  auto reason = std::make_shared<std::string>(
      request.reason().empty() ? "replan requested" : request.reason().substr(0, 256));
  SubmitSolve<v1::VersionedPlan>(
      *std::move(memory),
      [this, req, job_id, reason, ctx]() { return SolveAndPublish(*req, *job_id, *reason, ctx); },
      std::move(done));
}

absl::StatusOr<v1::VersionedPlan> PlannerHandlers::SolveAndPublish(const v1::PlanRequest& request,
                                                                   const std::string& job_id,
                                                                   const std::string& reason,
                                                                   const CallContext& ctx) {
  // Like the policy's replans: stages go only where a worker is alive, and
  // the stored request stays the job's whole cluster. With replicated
  // planners, workers that talk to other replicas count too.
  registry_.AdoptStoredWorkers(job_id);
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, registry_.GetJob(job_id));
  const LostDevices lost = FindLostDevices(job, request.cluster());
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest live, OnLiveDevices(request, lost, job_id));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Plan plan, Solve(live, ctx, /*fit_to_devices=*/true));
  const std::string why =
      lost.devices.empty()
          ? reason
          : absl::StrCat(reason, " (left out, no live worker: ", absl::StrJoin(lost.devices, ", "),
                         ")");
  // The out-of-sample check (version_prediction.h): the new plan under the
  // current version's calibration, stored with it. A job with nothing to
  // calibrate from still gets its plan.
  absl::StatusOr<v1::VersionPrediction> prediction =
      PredictFromCurrent(registry_, job_id, request, plan, lost.devices,
                         options_.replan.warmup_steps, options_.limits);
  PIPEPLAN_ASSIGN_OR_RETURN(
      int64_t version, registry_.PublishPlan(job_id, request, plan, why, 0, PublishAs::kOperator,
                                             prediction.ok() ? &*prediction : nullptr));
  if (metrics_) metrics_->CountReplan("requested");
  return registry_.GetPlan(job_id, version);
}

void PlannerHandlers::AfterSolve(std::shared_ptr<MemoryBudget::Reservation> memory) {
  const int64_t bytes = memory->bytes();
  memory.reset();
  // A large solve leaves its pages in malloc's per-thread arenas; give them
  // back so the planner's RSS follows the budget down.
  if (bytes >= kReleaseAfterSolveBytes) ReleaseFreedMemory();
}

absl::StatusOr<v1::Job> PlannerHandlers::GetJob(const v1::GetJobRequest& request) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, registry_.GetJob(request.job_id()));
  // Measured against predicted; a plan that cannot be read has none.
  absl::StatusOr<v1::JobObservation> seen =
      ObserveJob(registry_, job.id(),
                 {.warmup_steps = options_.replan.warmup_steps, .limits = options_.limits});
  if (seen.ok()) {
    if (metrics_) metrics_->SetJobObservation(job.id(), JobFiguresOf(*seen));
    *job.mutable_observation() = *std::move(seen);
  }
  return job;
}

void PlannerHandlers::RefreshJobGauges() {
  if (!metrics_) return;
  for (const v1::Job& job : registry_.ListJobs()) {
    if (job.state() != v1::JOB_RUNNING) continue;
    absl::StatusOr<v1::JobObservation> seen =
        ObserveJob(registry_, job.id(),
                   {.warmup_steps = options_.replan.warmup_steps, .limits = options_.limits});
    if (seen.ok()) metrics_->SetJobObservation(job.id(), JobFiguresOf(*seen));
  }
}

absl::StatusOr<v1::ListJobsResponse> PlannerHandlers::ListJobs(const v1::ListJobsRequest&) {
  v1::ListJobsResponse out;
  for (v1::Job& job : registry_.ListJobs()) *out.add_jobs() = std::move(job);
  return out;
}

absl::StatusOr<v1::DeleteJobResponse> PlannerHandlers::DeleteJob(
    const v1::DeleteJobRequest& request) {
  PIPEPLAN_RETURN_IF_ERROR(registry_.DeleteJob(request.job_id()));
  return v1::DeleteJobResponse();
}

absl::StatusOr<v1::Job> PlannerHandlers::CancelJob(const v1::CancelJobRequest& request) {
  return registry_.CancelJob(request.job_id(), request.reason().substr(0, 256));
}

absl::StatusOr<v1::VersionedPlan> PlannerHandlers::GetPlan(const v1::GetPlanRequest& request) {
  switch (request.view()) {
    case v1::PLAN_VIEW_FULL:
      return registry_.GetPlan(request.job_id(), request.version());
    case v1::PLAN_VIEW_CONTINGENCIES:
      return registry_.GetContingencies(request.job_id(), request.version(),
                                        request.known_contingency_generation());
    default:
      return absl::InvalidArgumentError(absl::StrCat("view: unknown value ", request.view()));
  }
}

absl::StatusOr<v1::Assignment> PlannerHandlers::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  return registry_.RegisterWorker(request.job_id(), request.worker());
}

absl::StatusOr<v1::HeartbeatResponse> PlannerHandlers::Heartbeat(
    const v1::HeartbeatRequest& request) {
  return registry_.Heartbeat(request);
}

absl::StatusOr<v1::Job> PlannerHandlers::FinishWorker(const v1::FinishWorkerRequest& request) {
  absl::StatusOr<v1::Job> job = registry_.FinishWorker(request);
  // A worker that left (SIGTERM) is replanned around now, not at the next
  // policy tick: its peers wait for the new version.
  if (job.ok() && request.leaving() && !request.whole_job()) policy_.Tick();
  return job;
}

absl::StatusOr<v1::ReportStepResponse> PlannerHandlers::ReportStep(
    const v1::ReportStepRequest& request) {
  // An unknown job falls through to the registry's NOT_FOUND.
  if (absl::StatusOr<double> predicted = registry_.PlannedStepSeconds(request.job_id());
      predicted.ok()) {
    std::string field;
    const absl::Status valid = CheckStepReport(request, *predicted, registry_.lease(), &field);
    if (!valid.ok()) {
      if (metrics_) metrics_->CountRejectedReport(field);
      return valid;
    }
  }
  return registry_.ReportStep(request);
}

absl::Status PlannerHandlers::WatchPlan(const v1::WatchPlanRequest& request,
                                        std::weak_ptr<PlanWatcher> watcher) {
  return registry_.Watch(request.job_id(), request.worker_id(), request.known_version(),
                         std::move(watcher));
}

absl::StatusOr<v1::RendezvousSetResponse> PlannerHandlers::RendezvousSet(
    const v1::RendezvousSetRequest& request) {
  PIPEPLAN_RETURN_IF_ERROR(
      registry_.RendezvousSet(request.job_id(), request.key(), request.value()));
  return v1::RendezvousSetResponse();
}

absl::StatusOr<v1::RendezvousGetResponse> PlannerHandlers::RendezvousGet(
    const v1::RendezvousGetRequest& request) {
  return registry_.RendezvousGet(request.job_id(), request.key());
}

absl::StatusOr<v1::ListStepReportsResponse> PlannerHandlers::ListStepReports(
    const v1::ListStepReportsRequest& request) {
  if (request.limit() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("limit must be >= 0, got ", request.limit()));
  }
  const int limit = request.limit() == 0 ? 1000 : std::min(request.limit(), 10'000);
  PIPEPLAN_ASSIGN_OR_RETURN(
      std::vector<v1::ReportStepRequest> reports,
      registry_.RecentStepReports(request.job_id(), limit, options_.max_list_report_bytes));
  // The store answers most recent first; the API promises oldest first.
  v1::ListStepReportsResponse out;
  for (auto it = reports.rbegin(); it != reports.rend(); ++it) *out.add_reports() = std::move(*it);
  return out;
}

}  // namespace pipeplan::server
