#include "pipeplan/core/schedule/lowering.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "pipeplan/core/schedule/validate.h"
#include "structure.h"

namespace pipeplan::schedule {
namespace {

// Hints the cache line `ahead` bytes past `p`. Prefetches never fault, so
// running past the end of a buffer is harmless.
inline void Prefetch(const void* p, size_t ahead, bool write) {
  const void* at = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + ahead);
  if (write) {
    __builtin_prefetch(at, 1);
  } else {
    __builtin_prefetch(at, 0);
  }
}

// Per-(stage, microbatch) state of the lock-step rounds, one byte each.
enum : uint8_t {
  kForwardPlaced = 1,
  kBackwardPlaced = 2,  // I or B
  kRecvFPlaced = 4,
  kRecvBPlaced = 8,
};

class SendRecvInserter {
 public:
  explicit SendRecvInserter(const PipelineSchedule& s)
      : s_(s),
        S_(s.num_stages),
        M_(s.num_microbatches),
        placed_(static_cast<size_t>(S_) * M_, 0),
        cross_next_(S_, 0),
        cross_prev_(S_, 0) {
    for (int st = 0; st < S_; ++st) {
      cross_next_[st] = st + 1 < S_ && !SameRank(st, st + 1);
      cross_prev_[st] = st > 0 && !SameRank(st, st - 1);
    }
  }

  // Expects CheckHeader to have passed. Checks the shape of each action as it
  // reaches it and, on any problem, reports what InsertSendRecv documents in
  // its order: a shape error, then existing communication, then a compute
  // order that never completes.
  absl::Status Run(PipelineSchedule& out) {
    std::vector<int> active = Prepare(out);
    std::vector<size_t> pos(s_.num_ranks, 0);
    const RankProgram* in = s_.programs.data();
    while (!active.empty()) {
      bool progress = false;
      bool finished = false;
      for (int r : active) {
        const std::optional<Action>* next = in[r].data() + pos[r];
        // Lock-step rounds visit each rank's input (and output) one slot at a
        // time, 2p interleaved streams that hardware prefetchers lose track
        // of; fetching a few cache lines ahead hides the memory latency.
        Prefetch(next, 8 * sizeof(*next), /*write=*/false);
        Prefetch(out_[r].data() + out_[r].size(), 8 * sizeof(*next), /*write=*/true);
        const Slot slot = Take(r, *next);
        if (slot == Slot::kInvalid) return Failure();
        if (slot == Slot::kBlocked) continue;
        finished |= ++pos[r] == in[r].size();
        progress = true;
      }
      if (!progress) return Failure();
      if (finished) {
        size_t kept = 0;
        for (int r : active) {
          if (pos[r] < in[r].size()) active[kept++] = r;
        }
        active.resize(kept);
      }
    }
    return absl::OkStatus();
  }

 private:
  // What a round did with one rank's next slot.
  enum class Slot { kTaken, kBlocked, kInvalid };

  // Sizes `out` like the input and reserves each rank's output: a valid
  // schedule has one F and one backward per (stage, microbatch), so each
  // rank gets exactly M communication actions per direction and cross-rank
  // neighbour of each of its stages, plus its compute slots; reserving that
  // makes appending reallocation-free (an invalid schedule merely grows its
  // vector before being rejected). Returns the ranks with a program.
  std::vector<int> Prepare(PipelineSchedule& out) {
    const int p = s_.num_ranks;
    std::vector<size_t> sizes(p, 0);
    for (int r = 0; r < p; ++r) sizes[r] = s_.programs[r].size();
    for (int st = 0; st < S_; ++st) {
      sizes[s_.stage_to_rank[st]] += size_t{2} * M_ * (cross_next_[st] + cross_prev_[st]);
    }
    out.num_ranks = p;
    out.num_stages = S_;
    out.num_microbatches = M_;
    out.stage_to_rank = s_.stage_to_rank;
    out.programs.resize(p);
    for (RankProgram& program : out.programs) program.clear();  // keeps the storage
    out_ = out.programs.data();
    std::vector<int> active;
    active.reserve(p);
    for (int r = 0; r < p; ++r) {
      out_[r].reserve(sizes[r]);
      if (!s_.programs[r].empty()) active.push_back(r);
    }
    return active;
  }

  // Places rank r's next slot (an empty one passes) once its inputs are.
  Slot Take(int r, const std::optional<Action>& slot) {
    if (!slot) return Slot::kTaken;
    const Action& a = *slot;
    if (a.type == ActionType::kOverlapFB) {
      if (!internal::SimpleOk(s_, r, ForwardHalf(a)) ||
          !internal::SimpleOk(s_, r, BackwardHalf(a))) {
        return Slot::kInvalid;
      }
      if (!Ready(ActionType::kForward, a.stage, a.microbatch) ||
          !Ready(ActionType::kFullBackward, a.backward_stage, a.backward_microbatch)) {
        return Slot::kBlocked;
      }
      out_[r].push_back(slot);
      Place(r, ActionType::kForward, a.stage, a.microbatch);
      Place(r, ActionType::kFullBackward, a.backward_stage, a.backward_microbatch);
      return Slot::kTaken;
    }
    if (!internal::SimpleOk(s_, r, a) || IsCommunication(a.type)) return Slot::kInvalid;
    if (!Ready(a.type, a.stage, a.microbatch)) return Slot::kBlocked;
    out_[r].push_back(slot);
    Place(r, a.type, a.stage, a.microbatch);
    return Slot::kTaken;
  }

  // The error for a schedule the rounds could not finish.
  absl::Status Failure() const {
    if (absl::Status st = internal::CheckShape(s_); !st.ok()) return st;
    if (s_.HasCommunication()) {
      return absl::InvalidArgumentError(
          "InsertSendRecv expects a compute-only schedule, but it already has SEND/RECV actions");
    }
    absl::Status why = ValidateSchedule(s_);
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot insert send/recv: the compute order never completes (%s)",
                        why.ok() ? "no rank can make progress" : why.message()));
  }

  size_t Index(int stage, int mb) const { return static_cast<size_t>(stage) * M_ + mb; }
  bool SameRank(int a, int b) const { return s_.stage_to_rank[a] == s_.stage_to_rank[b]; }

  bool Ready(ActionType type, int st, int mb) const {
    switch (type) {
      case ActionType::kForward:
        return st == 0 || (placed_[Index(st, mb)] & kRecvFPlaced) ||
               (!cross_prev_[st] && (placed_[Index(st - 1, mb)] & kForwardPlaced));
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward:
        return st == S_ - 1 || (placed_[Index(st, mb)] & kRecvBPlaced) ||
               (!cross_next_[st] && (placed_[Index(st + 1, mb)] & kBackwardPlaced));
      default:
        return true;
    }
  }

  // Records a placed compute half on rank r and, if its output crosses
  // ranks, appends the SEND here and the RECV on the peer rank.
  void Place(int r, ActionType type, int st, int mb) {
    if (type == ActionType::kForward) {
      placed_[Index(st, mb)] |= kForwardPlaced;
      if (cross_next_[st]) {
        out_[r].emplace_back(Action{st, ActionType::kSendF, mb});
        out_[s_.stage_to_rank[st + 1]].emplace_back(Action{st + 1, ActionType::kRecvF, mb});
        placed_[Index(st + 1, mb)] |= kRecvFPlaced;
      }
    } else if (type == ActionType::kBackwardInput || type == ActionType::kFullBackward) {
      placed_[Index(st, mb)] |= kBackwardPlaced;
      if (cross_prev_[st]) {
        out_[r].emplace_back(Action{st, ActionType::kSendB, mb});
        out_[s_.stage_to_rank[st - 1]].emplace_back(Action{st - 1, ActionType::kRecvB, mb});
        placed_[Index(st - 1, mb)] |= kRecvBPlaced;
      }
    }
  }

  const PipelineSchedule& s_;
  const int S_, M_;
  std::vector<uint8_t> placed_;
  std::vector<uint8_t> cross_next_, cross_prev_;
  RankProgram* out_ = nullptr;
};

}  // namespace

absl::StatusOr<PipelineSchedule> InsertSendRecv(const PipelineSchedule& compute_only) {
  PipelineSchedule out;
  if (absl::Status st = InsertSendRecv(compute_only, &out); !st.ok()) return st;
  return out;
}

absl::Status InsertSendRecv(const PipelineSchedule& compute_only, PipelineSchedule* out) {
  if (out == &compute_only) {
    return absl::InvalidArgumentError("InsertSendRecv cannot lower a schedule in place");
  }
  if (absl::Status st = internal::CheckHeader(compute_only); !st.ok()) return st;
  return SendRecvInserter(compute_only).Run(*out);
}

absl::StatusOr<PipelineSchedule> MergeBackward(const PipelineSchedule& schedule) {
  if (absl::Status st = internal::CheckShape(schedule); !st.ok()) return st;
  PipelineSchedule out = schedule;
  for (RankProgram& program : out.programs) {
    RankProgram merged;
    merged.reserve(program.size());
    for (size_t i = 0; i < program.size(); ++i) {
      if (!program[i]) continue;
      size_t next = i + 1;
      while (next < program.size() && !program[next]) ++next;
      const Action& a = *program[i];
      if (a.type == ActionType::kBackwardInput && next < program.size() &&
          program[next]->type == ActionType::kBackwardWeight && program[next]->stage == a.stage &&
          program[next]->microbatch == a.microbatch) {
        merged.emplace_back(Action{a.stage, ActionType::kFullBackward, a.microbatch});
        i = next;
      } else {
        merged.push_back(program[i]);
      }
    }
    program = std::move(merged);
  }
  return out;
}

}  // namespace pipeplan::schedule
