#include "pipeplan/worker/snapshot/snapshot_exchange.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/snapshot/snapshot_ring.h"
#include "pipeplan/worker/transport/collectives.h"

namespace pipeplan::worker {
namespace {

double Since(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

}  // namespace

SnapshotExchange::SnapshotExchange(Transport& world, SnapshotStore& store,
                                   SnapshotExchangeOptions options)
    : world_(world), store_(store), options_(std::move(options)) {
  if (options_.ring.empty()) {
    options_.ring.resize(static_cast<size_t>(world_.size()));
    std::iota(options_.ring.begin(), options_.ring.end(), 0);
  }
  next_ = RingNext(options_.ring, world_.rank());
  prev_ = RingPrev(options_.ring, world_.rank());
}

SnapshotExchange::~SnapshotExchange() { Settle(); }

void SnapshotExchange::Settle() {
  if (pending_step_ < 0) return;
  // Arrived already (the usual case: a round's transfer takes far less than
  // the steps between rounds) or abandoned; never waited for.
  const bool arrived = pending_recv_ && pending_recv_->Wait(absl::ZeroDuration()).ok();
  if (arrived) {
    (void)store_.CompleteHeld(pending_step_);  // an unreadable one is dropped
  } else {
    store_.AbandonHeld(pending_step_);
  }
  pending_send_.reset();
  pending_recv_.reset();
  pending_step_ = -1;
}

absl::Status SnapshotExchange::Finish() {
  if (pending_step_ < 0) return absl::OkStatus();
  const int64_t step = pending_step_;
  absl::Status s = pending_send_->Wait(options_.timeout);
  if (s.ok()) s = pending_recv_->Wait(options_.timeout);
  pending_send_.reset();
  pending_recv_.reset();
  pending_step_ = -1;
  if (!s.ok()) {
    store_.AbandonHeld(step);
    return absl::Status(s.code(),
                        absl::StrCat("the peer snapshot of step ", step, ": ", s.message()));
  }
  (void)store_.CompleteHeld(step);  // an unreadable one is dropped
  return absl::OkStatus();
}

absl::StatusOr<bool> SnapshotExchange::Agree(int64_t step, int64_t my_size, bool& held_reserved,
                                             absl::Status& refused) {
  const uint64_t tag = ExecutorTag(TagPurpose::kSnapshotSize, static_cast<uint64_t>(step), 0);
  int64_t prev_size = -1;
  PIPEPLAN_ASSIGN_OR_RETURN(
      auto send, world_.Send(next_, tag, std::as_bytes(std::span<int64_t>(&my_size, 1))));
  PIPEPLAN_ASSIGN_OR_RETURN(
      auto recv,
      world_.Recv(prev_, tag, std::as_writable_bytes(std::span<int64_t>(&prev_size, 1))));
  PIPEPLAN_RETURN_IF_ERROR(send->Wait(options_.timeout));
  PIPEPLAN_RETURN_IF_ERROR(recv->Wait(options_.timeout));
  bool ok = my_size >= 0 && prev_size >= 0;
  if (prev_size >= 0) {
    absl::StatusOr<std::span<std::byte>> held =
        store_.ReserveHeld(options_.world_devices.at(prev_), step, static_cast<size_t>(prev_size));
    if (held.ok()) {
      held_reserved = true;
      recv_span_ = *held;
    } else {
      ok = false;
      if (refused.ok()) refused = held.status();
    }
  }
  PIPEPLAN_ASSIGN_OR_RETURN(const int64_t vote, world_.AllReduceMax(ok ? 0 : 1, options_.timeout));
  return vote == 0;
}

absl::Status SnapshotExchange::Round(int64_t step, size_t bytes, const ExportFn& export_state,
                                     SnapshotRoundCost* cost) {
  const absl::Time start = absl::Now();
  SnapshotRoundCost c{.bytes = bytes};
  PIPEPLAN_RETURN_IF_ERROR(Finish());
  absl::Status refused = absl::OkStatus();
  int64_t my_size = -1;
  std::span<const std::byte> mine;
  absl::StatusOr<StatePack*> own = store_.ReserveOwn(step, bytes);
  if (own.ok()) {
    const absl::Time export_start = absl::Now();
    refused = export_state(**own);
    c.export_seconds = Since(export_start);
    if (refused.ok()) {
      store_.CommitOwn(step);
      mine = (*own)->bytes;
      my_size = static_cast<int64_t>(mine.size());
    }
  } else {
    refused = own.status();
  }
  bool go = false;
  if (options_.send_to_peer && world_.size() > 1) {
    bool held_reserved = false;
    PIPEPLAN_ASSIGN_OR_RETURN(go, Agree(step, my_size, held_reserved, refused));
    if (go) {
      const uint64_t tag = ExecutorTag(TagPurpose::kSnapshotData, static_cast<uint64_t>(step), 0);
      PIPEPLAN_ASSIGN_OR_RETURN(pending_send_, world_.Send(next_, tag, mine));
      PIPEPLAN_ASSIGN_OR_RETURN(pending_recv_, world_.Recv(prev_, tag, recv_span_));
      pending_step_ = step;
    } else if (held_reserved) {
      store_.AbandonHeld(step);
    }
    c.skipped = !go;
  }
  c.blocking_seconds = Since(start);
  if (cost != nullptr) *cost = c;
  return refused;
}

}  // namespace pipeplan::worker
