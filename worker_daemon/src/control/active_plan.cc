#include "active_plan.h"

#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pipeplan/common/retry_policy.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/common/torch_device.h"
#include "pipeplan/worker/env/event_log.h"
#include "pipeplan/worker/env/torch_device_map.h"
#include "pipeplan/worker/executors/executor_factory.h"
#include "pipeplan/worker/report/cpu_use.h"
#include "pipeplan/worker/transport/device_sharing.h"
#include "pipeplan/worker/transport/gloo_transport.h"
#include "pipeplan/worker/transport/group_transport.h"
#include "pipeplan/worker/transport/nccl_transport.h"
#include "pipeplan/worker/transport/rendezvous_round.h"

namespace pipeplan::worker {
namespace {

absl::StatusOr<v1::VersionedPlan> FetchPlan(PlannerApi& planner, const std::string& job_id,
                                            int64_t version, Clock& clock) {
  // About 5 s of 100 ms tries: the planner restarting, or a version not yet
  // replicated to the replica this worker asks.
  common::RetryEnv env;
  env.now = [&clock] { return clock.Now(); };
  env.sleep = [&clock](absl::Duration d) {
    clock.SleepFor(d);
    return true;
  };
  const common::RetryPolicy every_100ms{absl::Milliseconds(100), absl::Milliseconds(100), 1.0};
  return common::RetryUntil(every_100ms, clock.Now() + absl::Seconds(5), env,
                            [&] { return planner.GetPlan(job_id, version); });
}

// Ranks of the plan's one transport: every device, replica-major.
int WorldSize(const StagePlan& plan) { return plan.num_ranks * plan.num_replicas; }

// The GPU ordinal of a "cuda:N" torch device; -1 for cpu.
int CudaOrdinal(const std::string& torch_device) {
  absl::StatusOr<common::TorchDeviceName> name = common::ParseTorchDevice(torch_device);
  return name.ok() && name->cuda ? name->index : -1;
}

// Every rank's GPU UUID, exchanged in `round` (empty for a rank on the CPU
// or without a CUDA runtime): the input of TransportForDevices.
absl::StatusOr<std::vector<std::string>> ExchangeDeviceUuids(KeyValue& kv, const WorkerOptions& o,
                                                             const ActivePlan& a,
                                                             const RendezvousRound& round,
                                                             const RoundMember& me) {
  const int rank = a.plan.WorldRank(a.replica, a.rank);
  const int ordinal = CudaOrdinal(a.torch_device);
  const std::string mine = ordinal >= 0 ? CudaDeviceUuid(ordinal).value_or("") : "";
  // A prefix keeps an empty UUID a non-empty value for the key-value store.
  PIPEPLAN_RETURN_IF_ERROR(kv.Set(absl::StrCat(round.prefix(), "device_uuid/", rank), "u" + mine));
  std::vector<std::string> uuids(WorldSize(a.plan));
  for (int r = 0; r < static_cast<int>(uuids.size()); ++r) {
    PIPEPLAN_ASSIGN_OR_RETURN(
        std::string v,
        kv.WaitGet(absl::StrCat(round.prefix(), "device_uuid/", r), o.connect_timeout, me.abandon));
    uuids[r] = v.substr(1);
  }
  return uuids;
}

// One attempt to connect the transport, in `round`'s namespace.
absl::StatusOr<std::unique_ptr<Transport>> ConnectOnce(KeyValue& kv, const WorkerOptions& o,
                                                       const ActivePlan& a,
                                                       const RendezvousRound& round,
                                                       const RoundMember& me) {
  const int rank = a.plan.WorldRank(a.replica, a.rank);
  const int size = WorldSize(a.plan);
  if (o.transport == "nccl") {
    PIPEPLAN_ASSIGN_OR_RETURN(const std::vector<std::string> uuids,
                              ExchangeDeviceUuids(kv, o, a, round, me));
    if (TransportForDevices("nccl", uuids) == "nccl") {
      return ConnectNccl({.rank = rank,
                          .size = size,
                          .device_ordinal = CudaOrdinal(a.torch_device),
                          .timeout = o.connect_timeout},
                         kv, round.prefix());
    }
    const std::optional<std::pair<int, int>> shared = FirstSharedDevice(uuids);
    Emit(absl::StrCat(
        "event=transport_fallback job=", o.job_id, " worker=", o.worker_id,
        " plan_version=", a.version, " transport=gloo reason=",
        shared ? absl::StrCat("ranks_", shared->first, "_and_", shared->second, "_share_a_gpu")
               : std::string("a_rank_has_no_gpu")));
  }
  return ConnectGlooInRound(kv, round,
                            {.rank = rank,
                             .size = size,
                             .host = o.listen_host,
                             .timeout = o.comm_timeout,
                             .connect_timeout = o.connect_timeout},
                            o.connect_timeout);
}

// Workers that restart within a version (every worker of a job after a
// crash), or retry after a failed attempt, would find earlier addresses
// under the version's keys. So every attempt meets in a round of its own
// (rendezvous_round.h): rank 0 opens it with the nonces of the processes
// it expects, the others join it, and an attempt that cannot complete (a
// peer restarted, rank 0 moved on) ends early and the next round begins.
// A version newer than the one connecting is known: every wait ends (a peer
// the newer version leaves out may never come), so the step loop moves on.
absl::StatusOr<std::unique_ptr<Transport>> ConnectTransport(KeyValue& kv, const WorkerOptions& o,
                                                            const ActivePlan& a, Clock& clock,
                                                            const LatestVersionFn& latest) {
  const int64_t version = a.version;
  const RoundMember me{
      .base = absl::StrCat("v", version, "/", o.transport, "/"),
      .rank = a.plan.WorldRank(a.replica, a.rank),
      .size = WorldSize(a.plan),
      .nonce = ProcessRunId(),
      .timeout = o.connect_timeout,
      .abandon = [latest, version]() -> absl::Status {
        const int64_t newer = latest ? latest() : 0;
        if (newer <= version) return absl::OkStatus();
        return absl::AbortedError(absl::StrCat("plan version ", newer, " superseded version ",
                                               version, " during its rendezvous"));
      }};
  return ConnectInRounds(
      kv, me, clock.Now() + 3 * o.connect_timeout,
      [&](const RendezvousRound& round) { return ConnectOnce(kv, o, a, round, me); });
}

// This replica's pipeline and this rank's replica group, as groups of the
// plan's transport.
absl::Status MakeGroups(ActivePlan& a) {
  std::vector<int> pipeline;
  for (int r = 0; r < a.plan.num_ranks; ++r) pipeline.push_back(a.plan.WorldRank(a.replica, r));
  std::vector<int> replicas;
  for (int q = 0; q < a.plan.num_replicas; ++q) replicas.push_back(a.plan.WorldRank(q, a.rank));
  PIPEPLAN_ASSIGN_OR_RETURN(a.pipeline, GroupTransport::Create(a.transport.get(), pipeline));
  PIPEPLAN_ASSIGN_OR_RETURN(a.replica_group, GroupTransport::Create(a.transport.get(), replicas));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> TorchDeviceOf(const WorkerOptions& options,
                                          const v1::ClusterTopology& cluster) {
  // Only the torch executor and NCCL use the device; a synthetic worker on
  // a CPU host must not fail over a cluster written for GPUs.
  if (options.executor != "torch" && options.transport != "nccl") return std::string("cpu");
  TorchDeviceInputs in{.device_id = options.device_id,
                       .flag = options.torch_device,
                       .cuda_devices = VisibleCudaDevices()};
  std::string host;
  for (const v1::Device& d : cluster.devices()) {
    if (d.id() == options.device_id) {
      host = d.host();
      in.cluster_name = d.torch_device();
    }
  }
  for (const v1::Device& d : cluster.devices()) {
    if (d.id() == options.device_id) break;
    if (d.host() == host) ++in.local_index;
  }
  return MapTorchDevice(in);
}

const std::string& ProcessRunId() {
  static const std::string nonce = [] {
    std::random_device rd;
    return absl::StrCat(absl::Hex((uint64_t{rd()} << 32) ^ rd() ^ absl::ToUnixNanos(absl::Now())));
  }();
  return nonce;
}

ConnectTransportFn RendezvousConnector(KeyValue& kv, const WorkerOptions& options, Clock& clock,
                                       LatestVersionFn latest) {
  return [&kv, &options, &clock, latest = std::move(latest)](const ActivePlan& a) {
    return ConnectTransport(kv, options, a, clock, latest);
  };
}

absl::StatusOr<std::unique_ptr<ActivePlan>> BuildActivePlan(
    PlannerApi& planner, const ConnectTransportFn& connect, const WorkerOptions& options,
    int64_t version, TrainingSession* training, Clock& clock) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp,
                            FetchPlan(planner, options.job_id, version, clock));
  auto a = std::make_unique<ActivePlan>();
  a->version = version;
  PIPEPLAN_ASSIGN_OR_RETURN(a->plan, StagePlanFromProto(vp.plan(), version, &vp.request().graph(),
                                                        &vp.request().cluster()));
  a->rank = a->plan.RankOf(options.device_id);
  a->replica = a->plan.ReplicaOf(options.device_id);
  if (a->rank < 0) return a;
  PIPEPLAN_ASSIGN_OR_RETURN(a->torch_device, TorchDeviceOf(options, vp.request().cluster()));
  if (training) {
    a->samples_per_step = training->spec().batch_size();
  } else {
    a->samples_per_step = SamplesPerStep(options, a->plan, vp.request().options().global_batch());
  }
  PIPEPLAN_ASSIGN_OR_RETURN(a->transport, connect(*a));
  PIPEPLAN_RETURN_IF_ERROR(MakeGroups(*a));
  PIPEPLAN_ASSIGN_OR_RETURN(StageRuntime runtime,
                            StageRuntime::ForRank(a->plan.lowered, a->rank, options.comm_timeout));
  a->runtime = std::make_unique<StageRuntime>(std::move(runtime));
  const ExecutorPlace place{.rank = a->rank,
                            .replica = a->replica,
                            .pipeline = a->pipeline.get(),
                            .replica_group = a->replica_group.get(),
                            .torch_device = a->torch_device};
  if (training) {
    PIPEPLAN_ASSIGN_OR_RETURN(a->executor, training->MakeExecutor(a->plan, place));
  } else {
    PIPEPLAN_ASSIGN_OR_RETURN(a->executor,
                              MakeExecutor(options, a->plan, vp.request().graph(), place));
  }
  a->cpu_use = CurrentCpuUse(a->executor->CpuComputeThreads());
  return a;
}

}  // namespace pipeplan::worker
