// Where a restore from peer snapshots takes each parameter's state
// (docs/snapshots.md). After a lost rank (or a dropped step, whose live
// state may be half updated) every rank of the new version calls
// AgreeOnSnapshot with the model's parameter names. The ranks agree on the
// newest step at which every parameter has a complete snapshot on some
// live rank (its own copy, a replica's, or the peer that held a lost rank's
// state): the newest or the one before it (a round still in flight when the
// loss came). Every rank then rolls back to that step; the sources send
// each record to its new owners (MoveState).
#ifndef PIPEPLAN_WORKER_SNAPSHOT_RESTORE_H_
#define PIPEPLAN_WORKER_SNAPSHOT_RESTORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/client/model_package.h"
#include "pipeplan/worker/package/state_pack.h"
#include "pipeplan/worker/snapshot/snapshot_store.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct SnapshotChoice {
  int64_t step = 0;
  // Parameter name -> the ranks (of the transport) holding it at `step`,
  // lowest first.
  ParameterOwners from;
  // This rank's records at `step` (views into the store).
  NamedStateView mine;
};

// Collective over `world`: every rank passes the same `names` (every
// parameter of the model). std::nullopt when no step is covered (a lost
// rank and the peer holding its snapshot both gone, no snapshot taken yet):
// the caller falls back to the newest disk checkpoint. Transport errors as
// they come.
absl::StatusOr<std::optional<SnapshotChoice>> AgreeOnSnapshot(Transport& world,
                                                              const SnapshotStore& store,
                                                              const std::vector<std::string>& names,
                                                              uint64_t epoch,
                                                              absl::Duration timeout);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SNAPSHOT_RESTORE_H_
