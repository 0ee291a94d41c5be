#include "peer_snapshots.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/env/event_log.h"
#include "pipeplan/worker/package/state_transfer.h"
#include "pipeplan/worker/snapshot/snapshot_restore.h"
#include "pipeplan/worker/snapshot/snapshot_ring.h"

namespace pipeplan::worker {

PeerSnapshots::PeerSnapshots(const WorkerOptions& options, const v1::TrainingSpec& spec)
    : options_(options), spec_(spec), store_(options.snapshot_memory_limit_bytes) {}

int64_t PeerSnapshots::every() const {
  return spec_.has_snapshot_every() ? spec_.snapshot_every() : 1;
}

absl::Status PeerSnapshots::StartVersion(const StagePlan& plan, Transport& world,
                                         TorchExecutor& executor, int64_t step) {
  Release(exchange_ ? &exchange_->transport() : nullptr);
  // A single rank has no peer, and a restart of it loses its memory anyway.
  if (every() <= 0 || world.size() < 2) return absl::OkStatus();
  SnapshotExchangeOptions o;
  o.world_devices.resize(static_cast<size_t>(world.size()));
  std::vector<std::string> hosts(o.world_devices.size());
  for (int q = 0; q < plan.num_replicas; ++q) {
    for (int r = 0; r < plan.num_ranks; ++r) {
      o.world_devices.at(plan.WorldRank(q, r)) = plan.replica_devices[q][r];
      if (!plan.replica_hosts.empty()) hosts.at(plan.WorldRank(q, r)) = plan.replica_hosts[q][r];
    }
  }
  // Each rank's holder on another host: a lost host keeps its snapshots.
  o.ring = SnapshotRing(hosts);
  // A replica's rank holds the same state as this one: no peer copy needed.
  o.send_to_peer = plan.num_replicas == 1;
  o.timeout = options_.comm_timeout;
  exchange_ = std::make_unique<SnapshotExchange>(world, store_, std::move(o));
  version_ = plan.version;
  return Round(executor, step);
}

absl::Status PeerSnapshots::AfterStep(TorchExecutor& executor, int64_t steps) {
  if (!exchange_ || every() <= 0 || steps % every() != 0) return absl::OkStatus();
  // After the job's last step nobody restores a snapshot, and the peer it
  // would go to may already have exited.
  if (spec_.max_steps() > 0 && steps >= spec_.max_steps()) return absl::OkStatus();
  return Round(executor, steps);
}

void PeerSnapshots::Release(const Transport* transport) {
  if (exchange_ && &exchange_->transport() == transport) exchange_.reset();
}

absl::Status PeerSnapshots::Round(TorchExecutor& executor, int64_t step) {
  absl::StatusOr<size_t> bytes = executor.PackBytes();
  if (!bytes.ok()) return bytes.status();
  SnapshotRoundCost cost;
  const absl::Status s = exchange_->Round(
      step, *bytes, [&executor](StatePack& pack) { return executor.ExportPack(pack); }, &cost);
  Emit(absl::StrCat("event=snapshot job=", options_.job_id, " worker=", options_.worker_id,
                    " step=", step, " plan_version=", version_, " bytes=", cost.bytes,
                    " export_seconds=", cost.export_seconds,
                    " blocking_seconds=", cost.blocking_seconds, " skipped=", cost.skipped ? 1 : 0,
                    " held_bytes=", store_.bytes(), " code=", absl::StatusCodeToString(s.code())));
  // Memory refusals and export failures skip the round; training goes on.
  if (s.code() == absl::StatusCode::kResourceExhausted || s.code() == absl::StatusCode::kInternal) {
    Emit(absl::StrCat("event=snapshot_skipped job=", options_.job_id, " worker=",
                      options_.worker_id, " step=", step, " reason=\"", s.message(), "\""));
    return absl::OkStatus();
  }
  return s;
}

absl::StatusOr<std::optional<int64_t>> PeerSnapshots::Restore(Transport& world,
                                                              TorchExecutor& executor,
                                                              const ParameterOwners& to,
                                                              int64_t min_step, uint64_t epoch) {
  std::vector<std::string> names;
  for (const auto& [name, ranks] : to) names.push_back(name);
  PIPEPLAN_ASSIGN_OR_RETURN(std::optional<SnapshotChoice> choice,
                            AgreeOnSnapshot(world, store_, names, epoch, options_.comm_timeout));
  if (!choice || choice->step < min_step) return std::optional<int64_t>();
  PIPEPLAN_ASSIGN_OR_RETURN(NamedState moved, MoveState(world, choice->mine, choice->from, to,
                                                        epoch, options_.comm_timeout));
  // The records this rank holds itself need no move: MoveState copied them.
  PIPEPLAN_RETURN_IF_ERROR(executor.ImportState(moved, /*complete=*/true));
  return std::optional<int64_t>(choice->step);
}

}  // namespace pipeplan::worker
