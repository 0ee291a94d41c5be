// One plan version as this worker runs it: the decoded stage plan, this
// device's (replica, rank), and, when the device holds stages, the transport
// over every device of the plan with its two groups (this replica's pipeline,
// this rank's replica group), the stage runtime and the executor. Built at
// every plan switch, dropped at the next. Internal to libpipeplan_worker.
#ifndef PIPEPLAN_WORKER_SRC_ACTIVE_PLAN_H_
#define PIPEPLAN_WORKER_SRC_ACTIVE_PLAN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "pipeplan/worker/env/clock.h"
#include "pipeplan/worker/env/planner_api.h"
#include "pipeplan/worker/env/worker_options.h"
#include "pipeplan/worker/runtime/executor.h"
#include "pipeplan/worker/runtime/runtime.h"
#include "pipeplan/worker/runtime/stage_plan.h"
#include "pipeplan/worker/training/training_session.h"
#include "pipeplan/worker/transport/allreduce_probe.h"
#include "pipeplan/worker/transport/rendezvous.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct ActivePlan {
  int64_t version = 0;
  StagePlan plan;
  // -1 when the version gives this device no stage; then the rest is null.
  int rank = -1;
  int replica = -1;
  // The torch device this worker runs on in this version ("cpu" or
  // "cuda:N"; env/torch_device_map.h): the torch executor's, and the GPU
  // the NCCL transport uses.
  std::string torch_device = "cpu";
  // Every device of the plan, rank plan.WorldRank(replica, rank): votes at
  // step boundaries and state moves at switches.
  std::unique_ptr<Transport> transport;
  // This replica's ranks (pipeline sends and receives, the executor's sums
  // over ranks) and this rank's replicas (the gradient all-reduce; rank =
  // the replica). Groups of `transport`.
  std::unique_ptr<Transport> pipeline;
  std::unique_ptr<Transport> replica_group;
  std::unique_ptr<StageRuntime> runtime;
  std::unique_ptr<Executor> executor;
  // Rows of the global batch one step trains (samples/s); 0 when unknown.
  int64_t samples_per_step = 0;
  // The CPU pool the executor's computes share, read once when the version
  // is built (every step report carries it); nullopt off the CPU.
  std::optional<v1::CpuUse> cpu_use;
  // The all-reduce probe's result at the switch into this version (every
  // step report carries it); nullopt when it did not run.
  std::optional<AllReduceProbe> allreduce_probe;

  // Called once before the transport goes away (the training session's
  // snapshot traffic on it settles: TrainingSession::ReleaseTransport).
  std::function<void()> on_disconnect;

  ActivePlan() = default;
  ActivePlan(const ActivePlan&) = delete;
  ActivePlan& operator=(const ActivePlan&) = delete;
  ~ActivePlan() {
    if (on_disconnect) on_disconnect();
  }

  // Connected to its peers: can vote at a step boundary and run steps.
  bool connected() const { return transport != nullptr; }
  // Drops the transports (the groups first: they point into `transport`).
  void Disconnect() {
    if (on_disconnect) std::exchange(on_disconnect, nullptr)();
    pipeline.reset();
    replica_group.reset();
    transport.reset();
  }
};

// This process's run of the worker: random, new at every start. It names the
// run in rendezvous keys (a restarted worker never meets the previous run's
// addresses) and in step reports (WorkerInfo.run_id).
const std::string& ProcessRunId();

// This worker's torch device in a version whose request has `cluster`
// (MapTorchDevice with --torch-device, the cluster device's torch_device and
// local index, and the host's CUDA devices); "cpu" for workers that use
// none (neither the torch executor nor NCCL).
absl::StatusOr<std::string> TorchDeviceOf(const WorkerOptions& options,
                                          const v1::ClusterTopology& cluster);

// Connects the transport over every device of `a.plan` as this device's
// world rank (a.plan.WorldRank(a.replica, a.rank)). Every device of the
// version (all replicas) connects for any of them to succeed.
using ConnectTransportFn =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(const ActivePlan& a)>;

// The newest plan version this worker knows (ControlState::Latest).
using LatestVersionFn = std::function<int64_t()>;

// The daemon's way: a rendezvous round through `kv` keyed by the version,
// then Gloo or NCCL as `options.transport` says (rendezvous_round.h). With
// NCCL every rank first publishes its GPU's UUID in the round; when two
// ranks share a GPU (NCCL refuses that) all of them use Gloo instead
// (device_sharing.h). Once `latest` (when set) names a newer version than
// the one connecting, every rendezvous wait ends with ABORTED, a peer
// failure the step loop recovers from by moving on to the newer version.
// `kv`, `options` and `clock` must outlive the function.
ConnectTransportFn RendezvousConnector(KeyValue& kv, const WorkerOptions& options, Clock& clock,
                                       LatestVersionFn latest = nullptr);

// Fetches `version` (GetPlan: plan and request graph, retried every 100 ms
// on `clock` while the planner is unavailable), decodes it, and for a device
// with a rank maps it to its torch device (before connecting, so a device
// this host lacks fails here: FAILED_PRECONDITION naming it), connects the
// transport (`connect`), builds the stage runtime and the executor
// (MakeExecutor, or `training`'s torch executor when not null).
absl::StatusOr<std::unique_ptr<ActivePlan>> BuildActivePlan(
    PlannerApi& planner, const ConnectTransportFn& connect, const WorkerOptions& options,
    int64_t version, TrainingSession* training, Clock& clock);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_ACTIVE_PLAN_H_
