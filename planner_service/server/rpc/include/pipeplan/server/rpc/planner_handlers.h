// The planner's request handlers: everything pipeplan.v1.PlannerService
// does, with plain C++ types and no gRPC (Ray's HandleX(request, reply,
// callback) shape), so tests drive it without a socket. PlannerHandlers owns
// the job registry, the solver pool, the request cache and the replan
// policy. The gRPC adapter (planner_service/server/grpc_adapter.h) only
// admits calls and translates them and their statuses; PlannerServer
// (server.h) wires both to a listening port.
//
// Solves (Plan, CreateJob, ReplanJob) run on the SolvePool, never on the
// caller's thread; their callback runs on a pool thread, or inline when the
// answer is known at once (cache hit, invalid input, pool full, memory
// budget full). Each solve holds its estimated peak memory in the
// MemoryBudget from admission until its callback has run. Every other
// handler is synchronous and cheap.
//
// Thread safety: all methods may be called from any thread.
#ifndef PIPEPLAN_SERVER_RPC_PLANNER_HANDLERS_H_
#define PIPEPLAN_SERVER_RPC_PLANNER_HANDLERS_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/replan/replan_policy.h"
#include "pipeplan/server/solve/memory_budget.h"
#include "pipeplan/server/solve/request_cache.h"
#include "pipeplan/server/solve/solve_pool.h"
#include "pipeplan/server/store/store.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

class Metrics;

struct HandlerOptions {
  GraphLimits limits;               // max nodes / edges (RESOURCE_EXHAUSTED above)
  int max_cluster_devices = 4'096;  // RESOURCE_EXHAUSTED above
  int solver_threads = 0;           // 0: hardware concurrency (at least 2)
  int max_concurrent_solves = 256;  // queued + running; RESOURCE_EXHAUSTED above
  // Estimated peak memory of all admitted solves together (memory_budget.h);
  // <= 0: unlimited. RESOURCE_EXHAUSTED past it.
  int64_t solve_memory_bytes = int64_t{4} << 30;
  // ListStepReports answers at most this many serialized bytes (the newest
  // reports that fit), well inside the default gRPC message limit.
  int64_t max_list_report_bytes = 32 << 20;
  // Taken off the RPC deadline so the answer is sent before the client gives up.
  absl::Duration deadline_margin = absl::Milliseconds(50);
  RequestCache::Options cache;
  JobRegistry::Options registry;
  ReplanPolicyOptions replan;  // its `limits` are taken from `limits` above
};

// Per-call context: the RPC's deadline and a flag the transport sets when the
// call is cancelled (client gone, deadline passed).
struct CallContext {
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
};

template <typename T>
using Callback = std::function<void(absl::StatusOr<T>)>;

class PlannerHandlers {
 public:
  // `store`, `clock` must outlive the handlers; `metrics` may be null.
  PlannerHandlers(HandlerOptions options, Store* store, const Clock* clock,
                  Metrics* metrics = nullptr);
  ~PlannerHandlers();

  absl::Status Recover() { return registry_.Recover(); }

  void HandlePlan(const v1::PlanRequest& request, const CallContext& ctx, Callback<v1::Plan> done);
  void HandleCreateJob(const v1::CreateJobRequest& request, const CallContext& ctx,
                       Callback<v1::Job> done);
  void HandleReplanJob(const v1::ReplanJobRequest& request, const CallContext& ctx,
                       Callback<v1::VersionedPlan> done);

  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request);
  // Observes every RUNNING job and sets its pipeplan_job_* gauges, so a
  // scrape sees them without anyone calling GetJob (server.cc runs it on a
  // timer). Jobs whose plan cannot be observed keep their last figures.
  void RefreshJobGauges();
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  absl::StatusOr<v1::DeleteJobResponse> DeleteJob(const v1::DeleteJobRequest& request);
  absl::StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request);
  absl::StatusOr<v1::VersionedPlan> GetPlan(const v1::GetPlanRequest& request);
  absl::StatusOr<v1::Assignment> RegisterWorker(const v1::RegisterWorkerRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  absl::StatusOr<v1::Job> FinishWorker(const v1::FinishWorkerRequest& request);
  absl::StatusOr<v1::ReportStepResponse> ReportStep(const v1::ReportStepRequest& request);
  absl::Status WatchPlan(const v1::WatchPlanRequest& request, std::weak_ptr<PlanWatcher> watcher);
  absl::StatusOr<v1::RendezvousSetResponse> RendezvousSet(const v1::RendezvousSetRequest& request);
  absl::StatusOr<v1::RendezvousGetResponse> RendezvousGet(const v1::RendezvousGetRequest& request);
  // The job's most recent step reports, oldest first (limit 0: 1000, at
  // most 10000), and no more than max_list_report_bytes of them.
  absl::StatusOr<v1::ListStepReportsResponse> ListStepReports(
      const v1::ListStepReportsRequest& request);

  // Stops admitting solves, waits for the admitted ones, ends every watch
  // with OK. Idempotent.
  void Shutdown();

  JobRegistry& registry() { return registry_; }
  SolvePool& pool() { return pool_; }
  RequestCache& cache() { return cache_; }
  MemoryBudget& memory_budget() { return budget_; }
  ReplanPolicy& replan_policy() { return policy_; }

 private:
  // Validates, solves (honouring deadline and cancellation) and converts;
  // `fit_to_devices` caps the ranks and replicas at the request's cluster.
  absl::StatusOr<v1::Plan> Solve(const v1::PlanRequest& request, const CallContext& ctx,
                                 bool fit_to_devices = false);
  absl::Status CheckLimits(const v1::PlanRequest& request) const;
  // ReplanJob's work on the pool: solve over the devices with a live worker
  // (live_devices.h), publish as the next version.
  absl::StatusOr<v1::VersionedPlan> SolveAndPublish(const v1::PlanRequest& request,
                                                    const std::string& job_id,
                                                    const std::string& reason,
                                                    const CallContext& ctx);
  // Last step of a solve task, after its answer was sent and its request
  // freed: gives the reservation back (the task's copy, the only one).
  static void AfterSolve(std::shared_ptr<MemoryBudget::Reservation> memory);
  // Reserves the solve's estimated memory; `request_bytes` < 0: computed.
  absl::StatusOr<std::shared_ptr<MemoryBudget::Reservation>> ReserveMemory(
      const v1::PlanRequest& request, int64_t request_bytes = -1);
  void PublishSolveGauges();
  // Runs `solve` on the solver pool and answers `done` with its result; then
  // drops `solve` (and the request copies it holds) and gives `memory` back.
  // When the pool refuses the task (its queue is full), answers at once.
  template <typename T>
  void SubmitSolve(std::shared_ptr<MemoryBudget::Reservation> memory,
                   std::function<absl::StatusOr<T>()> solve, Callback<T> done);

  const HandlerOptions options_;
  const Clock* const clock_;
  Metrics* const metrics_;
  RequestCache cache_;
  JobRegistry registry_;
  MemoryBudget budget_;  // before pool_: queued solves hold reservations
  SolvePool pool_;
  ReplanPolicy policy_;  // after pool_: its tasks run on it
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_RPC_PLANNER_HANDLERS_H_
