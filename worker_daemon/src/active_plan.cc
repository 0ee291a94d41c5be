#include "active_plan.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pipeplan/core/status_macros.h"
#include "pipeplan/worker/executor_factory.h"
#include "pipeplan/worker/gloo_transport.h"
#include "pipeplan/worker/nccl_transport.h"
#include "retryable.h"

namespace pipeplan::worker {
namespace {

absl::StatusOr<v1::VersionedPlan> FetchPlan(client::PlannerClient& planner,
                                            const std::string& job_id, int64_t version) {
  absl::StatusOr<v1::VersionedPlan> vp;
  for (int attempt = 0; attempt < 50; ++attempt) {
    vp = planner.GetPlan(job_id, version);
    if (vp.ok() || !Retryable(vp.status())) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return vp;
}

// Keys of the round are prefixed "v<version>/<transport>/".
absl::StatusOr<std::unique_ptr<Transport>> ConnectTransport(KeyValue& kv, const WorkerOptions& o,
                                                            const ActivePlan& a) {
  const std::string prefix = absl::StrCat("v", a.version, "/", o.transport, "/");
  if (o.transport == "nccl") {
    return ConnectNccl(
        {.rank = a.rank, .size = a.plan.ranks, .device_ordinal = -1, .timeout = o.connect_timeout},
        kv, prefix);
  }
  GlooKeyValueStore store(&kv, prefix, o.connect_timeout);
  return ConnectGloo(
      {.rank = a.rank, .size = a.plan.ranks, .host = o.listen_host, .timeout = o.comm_timeout},
      store);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ActivePlan>> BuildActivePlan(client::PlannerClient& planner,
                                                            KeyValue& kv,
                                                            const WorkerOptions& options,
                                                            int64_t version) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, FetchPlan(planner, options.job_id, version));
  auto a = std::make_unique<ActivePlan>();
  a->version = version;
  PIPEPLAN_ASSIGN_OR_RETURN(a->plan, StagePlanFromProto(vp.plan(), version, &vp.request().graph()));
  a->rank = a->plan.RankOf(options.device_id);
  if (a->rank < 0) return a;
  PIPEPLAN_ASSIGN_OR_RETURN(a->transport, ConnectTransport(kv, options, *a));
  PIPEPLAN_ASSIGN_OR_RETURN(StageRuntime runtime,
                            StageRuntime::ForRank(a->plan.lowered, a->rank, options.comm_timeout));
  a->runtime = std::make_unique<StageRuntime>(std::move(runtime));
  PIPEPLAN_ASSIGN_OR_RETURN(a->executor,
                            MakeExecutor(options, a->plan, vp.request().graph(), a->rank));
  return a;
}

}  // namespace pipeplan::worker
