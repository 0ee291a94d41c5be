// The in-memory peer snapshots one worker holds (docs/snapshots.md; the
// in-memory checkpoints of Gemini, SOSP'23): its own rank's state at the
// last two snapshot steps, and the state a peer rank sent it at the last
// two (the newest complete one and the one arriving). Each is a state pack
// (package/state_pack.h) of tensor records by canonical parameter name, in
// host memory, kept across plan versions (a restore reads them after the
// version that took them was dropped).
//
// Memory is bounded: every slot counts its bytes against `limit_bytes`,
// and a slot that would pass the limit is refused with RESOURCE_EXHAUSTED
// naming the limit (--snapshot-memory-limit-mb). A slot's memory is reused
// by the next round of the same size (no allocation per round).
//
// Thread safety: one thread (the step loop's) uses a store.
#ifndef PIPEPLAN_WORKER_SNAPSHOT_STORE_H_
#define PIPEPLAN_WORKER_SNAPSHOT_STORE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "pipeplan/worker/package/state_pack.h"

namespace pipeplan::worker {

class SnapshotStore {
 public:
  explicit SnapshotStore(size_t limit_bytes) : limit_(limit_bytes) {}
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // The own slot to export the state after `step` steps into (the older of
  // the two, its memory reused), cleared until CommitOwn. RESOURCE_EXHAUSTED
  // when `bytes` more would pass the limit.
  absl::StatusOr<StatePack*> ReserveOwn(int64_t step, size_t bytes);
  // The export into ReserveOwn's slot is complete.
  void CommitOwn(int64_t step);

  // Memory for the state of `source` (a device id) after `step` steps,
  // arriving from a peer: never the newest complete held slot.
  // RESOURCE_EXHAUSTED as ReserveOwn.
  absl::StatusOr<std::span<std::byte>> ReserveHeld(const std::string& source, int64_t step,
                                                   size_t bytes);
  // The bytes of ReserveHeld(step) arrived (parsed here: INVALID_ARGUMENT
  // when they are not a pack, and the slot is dropped) or never will.
  absl::Status CompleteHeld(int64_t step);
  void AbandonHeld(int64_t step);

  // Complete steps, newest first (own and held slots together).
  std::optional<int64_t> NewestStep() const;
  std::optional<int64_t> NewestStepBelow(int64_t step) const;
  // Every record held (own or held slot) at `step`, complete slots only.
  NamedStateView At(int64_t step) const;
  bool Holds(int64_t step, const std::string& name) const;

  // Bytes held (all slots) and the limit.
  size_t bytes() const;
  size_t limit_bytes() const { return limit_; }

 private:
  struct Slot {
    int64_t step = -1;
    bool complete = false;
    std::string source;  // held slots: whose state
    StatePack pack;
  };
  absl::Status CheckFits(const Slot& replaced, size_t bytes) const;
  Slot* OlderOf(std::array<Slot, 2>& slots);

  size_t limit_;
  std::array<Slot, 2> own_;
  std::array<Slot, 2> held_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SNAPSHOT_STORE_H_
