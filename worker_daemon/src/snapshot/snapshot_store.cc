#include "pipeplan/worker/snapshot/snapshot_store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pipeplan::worker {
namespace {

std::string Mb(size_t bytes) { return absl::StrFormat("%.1f MB", bytes / 1e6); }

}  // namespace

size_t SnapshotStore::bytes() const {
  size_t n = 0;
  for (const Slot& s : own_) n += s.pack.bytes.size();
  for (const Slot& s : held_) n += s.pack.bytes.size();
  return n;
}

absl::Status SnapshotStore::CheckFits(const Slot& replaced, size_t bytes) const {
  const size_t after = this->bytes() - replaced.pack.bytes.size() + bytes;
  if (after <= limit_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "a peer snapshot of ", Mb(bytes),
      " does not fit --snapshot-memory-limit-mb=", limit_ / 1000000, " (",
      Mb(this->bytes() - replaced.pack.bytes.size()), " held by the other snapshots)"));
}

// The slot a new round overwrites: an empty or incomplete one, else the
// older complete one.
SnapshotStore::Slot* SnapshotStore::OlderOf(std::array<Slot, 2>& slots) {
  for (Slot& s : slots) {
    if (!s.complete) return &s;
  }
  return slots[0].step <= slots[1].step ? &slots[0] : &slots[1];
}

absl::StatusOr<StatePack*> SnapshotStore::ReserveOwn(int64_t step, size_t bytes) {
  Slot* slot = OlderOf(own_);
  if (absl::Status fits = CheckFits(*slot, bytes); !fits.ok()) return fits;
  slot->step = step;
  slot->complete = false;
  slot->pack.views.clear();
  return &slot->pack;
}

void SnapshotStore::CommitOwn(int64_t step) {
  for (Slot& s : own_) {
    if (s.step == step && !s.complete) s.complete = true;
  }
}

absl::StatusOr<std::span<std::byte>> SnapshotStore::ReserveHeld(const std::string& source,
                                                                int64_t step, size_t bytes) {
  Slot* slot = OlderOf(held_);
  if (absl::Status fits = CheckFits(*slot, bytes); !fits.ok()) return fits;
  slot->step = step;
  slot->complete = false;
  slot->source = source;
  slot->pack.views.clear();
  slot->pack.bytes.resize(bytes);
  return std::span<std::byte>(slot->pack.bytes);
}

absl::Status SnapshotStore::CompleteHeld(int64_t step) {
  for (Slot& s : held_) {
    if (s.step != step || s.complete) continue;
    absl::StatusOr<NamedStateView> views = ParseStatePack(s.pack.bytes);
    if (!views.ok()) {
      s.step = -1;
      return absl::InvalidArgumentError(absl::StrCat("the snapshot of ", s.source, " at step ",
                                                     step, ": ", views.status().message()));
    }
    s.pack.views = *std::move(views);
    s.complete = true;
  }
  return absl::OkStatus();
}

void SnapshotStore::AbandonHeld(int64_t step) {
  for (Slot& s : held_) {
    if (s.step == step && !s.complete) s.step = -1;
  }
}

std::optional<int64_t> SnapshotStore::NewestStepBelow(int64_t below) const {
  std::optional<int64_t> best;
  for (const auto* slots : {&own_, &held_}) {
    for (const Slot& s : *slots) {
      if (s.complete && s.step < below && (!best || s.step > *best)) best = s.step;
    }
  }
  return best;
}

std::optional<int64_t> SnapshotStore::NewestStep() const { return NewestStepBelow(INT64_MAX); }

NamedStateView SnapshotStore::At(int64_t step) const {
  NamedStateView out;
  for (const auto* slots : {&own_, &held_}) {
    for (const Slot& s : *slots) {
      if (s.complete && s.step == step) out.insert(s.pack.views.begin(), s.pack.views.end());
    }
  }
  return out;
}

bool SnapshotStore::Holds(int64_t step, const std::string& name) const {
  for (const auto* slots : {&own_, &held_}) {
    for (const Slot& s : *slots) {
      if (s.complete && s.step == step && s.pack.views.contains(name)) return true;
    }
  }
  return false;
}

}  // namespace pipeplan::worker
