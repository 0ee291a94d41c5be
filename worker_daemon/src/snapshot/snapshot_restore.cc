#include "pipeplan/worker/snapshot/snapshot_restore.h"

#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/transport/collectives.h"

namespace pipeplan::worker {
namespace {

// The candidate steps, newest first: the newest complete step any rank
// holds and the newest below it.
absl::StatusOr<std::vector<int64_t>> Candidates(Transport& world, const SnapshotStore& store,
                                                absl::Duration timeout) {
  std::vector<int64_t> out;
  PIPEPLAN_ASSIGN_OR_RETURN(const int64_t newest,
                            world.AllReduceMax(store.NewestStep().value_or(-1), timeout));
  if (newest < 0) return out;
  out.push_back(newest);
  PIPEPLAN_ASSIGN_OR_RETURN(
      const int64_t before,
      world.AllReduceMax(store.NewestStepBelow(newest).value_or(-1), timeout));
  if (before >= 0) out.push_back(before);
  return out;
}

}  // namespace

absl::StatusOr<std::optional<SnapshotChoice>> AgreeOnSnapshot(Transport& world,
                                                              const SnapshotStore& store,
                                                              const std::vector<std::string>& names,
                                                              uint64_t epoch,
                                                              absl::Duration timeout) {
  PIPEPLAN_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, Candidates(world, store, timeout));
  if (steps.empty()) return std::nullopt;
  const size_t n = static_cast<size_t>(world.size());
  const size_t rank = static_cast<size_t>(world.rank());
  // held[(c * names + i) * n + r]: rank r holds name i at candidate c. Each
  // rank fills its own column; the sum is everyone's answer.
  std::vector<double> held(steps.size() * names.size() * n, 0.0);
  for (size_t c = 0; c < steps.size(); ++c) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (store.Holds(steps[c], names[i])) held[(c * names.size() + i) * n + rank] = 1;
    }
  }
  if (n > 1) PIPEPLAN_RETURN_IF_ERROR(SumOverRanks(world, held, epoch, timeout));
  for (size_t c = 0; c < steps.size(); ++c) {
    SnapshotChoice choice{.step = steps[c]};
    bool covered = true;
    for (size_t i = 0; i < names.size() && covered; ++i) {
      std::vector<int>& ranks = choice.from[names[i]];
      for (size_t r = 0; r < n; ++r) {
        if (held[(c * names.size() + i) * n + r] > 0) ranks.push_back(static_cast<int>(r));
      }
      covered = !ranks.empty();
    }
    if (!covered) continue;
    choice.mine = store.At(steps[c]);
    return choice;
  }
  return std::nullopt;
}

}  // namespace pipeplan::worker
