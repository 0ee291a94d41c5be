// The torch session's in-memory peer snapshots (docs/snapshots.md): a round
// at every switch into a version and every `snapshot_every` steps (the
// job's TrainingSpec, 1 when unset, 0 = off), and the restore that takes a
// lost rank's state from the peer holding it. The store outlives versions;
// each version's exchange lives until its transport goes away
// (Release). Private to pipeplan_worker_training.
#ifndef PIPEPLAN_WORKER_SRC_TRAINING_PEER_SNAPSHOTS_H_
#define PIPEPLAN_WORKER_SRC_TRAINING_PEER_SNAPSHOTS_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "pipeplan/worker/env/worker_options.h"
#include "pipeplan/worker/runtime/stage_plan.h"
#include "pipeplan/worker/snapshot/snapshot_exchange.h"
#include "pipeplan/worker/snapshot/snapshot_store.h"
#include "pipeplan/worker/torch/torch_executor.h"

namespace pipeplan::worker {

class PeerSnapshots {
 public:
  PeerSnapshots(const WorkerOptions& options, const v1::TrainingSpec& spec);

  // Steps between rounds; 0: no snapshots.
  int64_t every() const;

  // Every device of `plan` calls this when it starts training the version at
  // `step` (after Resume): the version's first round. Transport errors as
  // they come; a round that did not fit memory is logged and skipped.
  absl::Status StartVersion(const StagePlan& plan, Transport& world, TorchExecutor& executor,
                            int64_t step);
  // After `steps` completed steps: a round when they are a multiple of
  // every(). Errors as StartVersion.
  absl::Status AfterStep(TorchExecutor& executor, int64_t steps);
  // `transport` goes away: its exchange settles and ends.
  void Release(const Transport* transport);

  // Collective over `world` (every device of the new version): rolls every
  // rank back to the newest step the live ranks' snapshots cover, when it is
  // at least `min_step` (the newest disk checkpoint's): the holders send each
  // record to its owners under `to` and `executor` imports its own. The step,
  // or nullopt (no covering snapshot: the caller loads the checkpoint).
  absl::StatusOr<std::optional<int64_t>> Restore(Transport& world, TorchExecutor& executor,
                                                 const ParameterOwners& to, int64_t min_step,
                                                 uint64_t epoch);

 private:
  absl::Status Round(TorchExecutor& executor, int64_t step);

  const WorkerOptions& options_;
  const v1::TrainingSpec& spec_;
  SnapshotStore store_;
  std::unique_ptr<SnapshotExchange> exchange_;
  int64_t version_ = 0;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_TRAINING_PEER_SNAPSHOTS_H_
