#include "active_plan.h"

#include <random>
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

// One rendezvous round under `prefix`.
absl::StatusOr<std::unique_ptr<Transport>> ConnectOnce(KeyValue& kv, const WorkerOptions& o,
                                                       const ActivePlan& a,
                                                       const std::string& prefix) {
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

// This process's identity in rendezvous keys: a restarted worker gets a new one.
const std::string& ProcessNonce() {
  static const std::string nonce = [] {
    std::random_device rd;
    return absl::StrCat(absl::Hex((uint64_t{rd()} << 32) ^ rd() ^ absl::ToUnixNanos(absl::Now())));
  }();
  return nonce;
}

// Workers that restart within a version (every worker of a job after a
// crash) would find the previous run's addresses under that version's keys.
// So each rank publishes its process nonce, and the round's keys live under
// the nonces of all ranks: live processes meet in a namespace no earlier run
// wrote. A rank that read a dead peer's nonce fails its round (timeout) and
// tries again with the nonces as they are now.
absl::StatusOr<std::unique_ptr<Transport>> ConnectTransport(KeyValue& kv, const WorkerOptions& o,
                                                            const ActivePlan& a) {
  const std::string base = absl::StrCat("v", a.version, "/", o.transport, "/");
  PIPEPLAN_RETURN_IF_ERROR(kv.Set(absl::StrCat(base, "nonce/", a.rank), ProcessNonce()));
  const absl::Time deadline = absl::Now() + 3 * o.connect_timeout;
  while (true) {
    std::string round;
    for (int r = 0; r < a.plan.ranks; ++r) {
      PIPEPLAN_ASSIGN_OR_RETURN(std::string nonce,
                                kv.WaitGet(absl::StrCat(base, "nonce/", r), o.connect_timeout));
      absl::StrAppend(&round, r == 0 ? "" : "-", nonce);
    }
    absl::StatusOr<std::unique_ptr<Transport>> t =
        ConnectOnce(kv, o, a, absl::StrCat(base, round, "/"));
    if (t.ok() || !Retryable(t.status()) || absl::Now() > deadline) return t;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ActivePlan>> BuildActivePlan(client::PlannerClient& planner,
                                                            KeyValue& kv,
                                                            const WorkerOptions& options,
                                                            int64_t version,
                                                            TrainingSession* training) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, FetchPlan(planner, options.job_id, version));
  auto a = std::make_unique<ActivePlan>();
  a->version = version;
  PIPEPLAN_ASSIGN_OR_RETURN(a->plan, StagePlanFromProto(vp.plan(), version, &vp.request().graph()));
  a->rank = a->plan.RankOf(options.device_id);
  if (a->rank < 0) return a;
  if (training) {
    a->samples_per_step = training->spec().batch_size();
  } else if (options.executor == "mlp") {
    a->samples_per_step = int64_t{options.mlp_rows} * a->plan.microbatches;
  } else {
    a->samples_per_step = vp.request().options().global_batch();
  }
  PIPEPLAN_ASSIGN_OR_RETURN(a->transport, ConnectTransport(kv, options, *a));
  PIPEPLAN_ASSIGN_OR_RETURN(StageRuntime runtime,
                            StageRuntime::ForRank(a->plan.lowered, a->rank, options.comm_timeout));
  a->runtime = std::make_unique<StageRuntime>(std::move(runtime));
  if (training) {
    PIPEPLAN_ASSIGN_OR_RETURN(a->executor,
                              training->MakeExecutor(a->plan, a->rank, a->transport.get()));
  } else {
    PIPEPLAN_ASSIGN_OR_RETURN(a->executor,
                              MakeExecutor(options, a->plan, vp.request().graph(), a->rank));
  }
  return a;
}

}  // namespace pipeplan::worker
