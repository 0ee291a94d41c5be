// The snapshot rounds of one plan version (docs/snapshots.md): after every
// `snapshot_every` steps and at the switch into the version, each rank
// copies its state into its own snapshot slot (host memory) and, without
// waiting, sends it to the next rank of the ring (options.ring, built by
// SnapshotRing so that the next rank is on another host), which holds it. The send completes in the
// background while training goes on; the next round waits for it first, so at most one round is in
// flight and a holder keeps the newest complete snapshot of its peer beside the arriving one.
//
// With data-parallel replicas every rank's state is also held by the same
// rank of the other replicas, so a round only takes the own copies (no
// peer traffic). A round that does not fit a rank's memory limit is skipped
// by every rank together (a vote), and that rank's Round returns the
// RESOURCE_EXHAUSTED; training goes on.
//
// Every rank of the transport calls Round at the same steps. The exchange
// posts on the transport only from Round, on the thread that drives the
// transport, and must be destroyed before the transport (Settle first).
#ifndef PIPEPLAN_WORKER_SNAPSHOT_EXCHANGE_H_
#define PIPEPLAN_WORKER_SNAPSHOT_EXCHANGE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "pipeplan/worker/snapshot/snapshot_store.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct SnapshotExchangeOptions {
  // Device id of each world rank of the transport.
  std::vector<std::string> world_devices;
  // World ranks in ring order (SnapshotRing): ring[i] sends to ring[i + 1].
  // Empty: 0, 1, ..., n - 1.
  std::vector<int> ring;
  // False with data-parallel replicas (or a single rank): own copies only.
  bool send_to_peer = true;
  absl::Duration timeout = absl::Seconds(60);
};

// What a round cost this rank.
struct SnapshotRoundCost {
  size_t bytes = 0;             // this rank's snapshot
  double export_seconds = 0;    // copying the state into the own slot
  double blocking_seconds = 0;  // all of Round: the step loop's pause
  bool skipped = false;
};

class SnapshotExchange {
 public:
  // Fills a reserved pack with this rank's state (the executor's export).
  using ExportFn = std::function<absl::Status(StatePack&)>;

  SnapshotExchange(Transport& world, SnapshotStore& store, SnapshotExchangeOptions options);
  ~SnapshotExchange();
  SnapshotExchange(const SnapshotExchange&) = delete;
  SnapshotExchange& operator=(const SnapshotExchange&) = delete;

  // A round after `step` completed steps; `bytes` is the size the export
  // will have. Waits for the previous round's transfer, exports, agrees
  // with the peers and posts this round's transfer. Transport errors as
  // they come (the version is then of no further use); RESOURCE_EXHAUSTED
  // when this rank's snapshot did not fit (the round was skipped).
  absl::Status Round(int64_t step, size_t bytes, const ExportFn& export_state,
                     SnapshotRoundCost* cost = nullptr);
  // Waits for the round in flight (if any) to arrive: the next Round's
  // first step, and a benchmark's end of a transfer. Errors as Round.
  absl::Status Finish();
  // The transport is going away: a transfer that has arrived completes, one
  // still under way is abandoned (the held slot it filled is dropped).
  void Settle();
  const Transport& transport() const { return world_; }

 private:
  // Sizes with the two neighbours, then the vote; true when every rank can
  // take part.
  absl::StatusOr<bool> Agree(int64_t step, int64_t my_size, bool& held_reserved,
                             absl::Status& refused);

  Transport& world_;
  SnapshotStore& store_;
  SnapshotExchangeOptions options_;
  int next_ = 0;  // the rank holding this rank's snapshot
  int prev_ = 0;  // the rank whose snapshot this rank holds
  int64_t pending_step_ = -1;
  std::unique_ptr<PendingOp> pending_send_;
  std::unique_ptr<PendingOp> pending_recv_;
  std::span<std::byte> recv_span_;  // the held slot the pending recv fills
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SNAPSHOT_EXCHANGE_H_
