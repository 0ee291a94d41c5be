#include "pipeplan/core/schedule/lowering.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "pipeplan/core/schedule/validate.h"
#include "structure.h"

namespace pipeplan::schedule {
namespace {

class SendRecvInserter {
 public:
  explicit SendRecvInserter(const PipelineSchedule& s)
      : s_(s),
        S_(s.num_stages),
        M_(s.num_microbatches),
        forward_placed_(static_cast<size_t>(S_) * M_, 0),
        backward_placed_(static_cast<size_t>(S_) * M_, 0),
        recv_f_placed_(static_cast<size_t>(S_) * M_, 0),
        recv_b_placed_(static_cast<size_t>(S_) * M_, 0) {}

  absl::StatusOr<PipelineSchedule> Run() {
    PipelineSchedule out;
    out.num_ranks = s_.num_ranks;
    out.num_stages = S_;
    out.num_microbatches = M_;
    out.stage_to_rank = s_.stage_to_rank;
    out.programs.resize(s_.num_ranks);
    std::vector<size_t> pos(s_.num_ranks, 0);
    std::vector<int> active;
    std::vector<size_t> sizes = LoweredSizes();
    for (int r = 0; r < s_.num_ranks; ++r) {
      out.programs[r].reserve(sizes[r]);
      if (!s_.programs[r].empty()) active.push_back(r);
    }
    while (!active.empty()) {
      bool progress = false;
      for (int r : active) {
        const std::optional<Action>& slot = s_.programs[r][pos[r]];
        if (slot) {
          if (!Ready(*slot)) continue;
          out.programs[r].push_back(slot);
          if (slot->type == ActionType::kOverlapFB) {
            Place(ForwardHalf(*slot), out);
            Place(BackwardHalf(*slot), out);
          } else {
            Place(*slot, out);
          }
        }
        ++pos[r];
        progress = true;
      }
      if (!progress) {
        absl::Status why = ValidateSchedule(s_);
        return absl::InvalidArgumentError(
            absl::StrFormat("cannot insert send/recv: the compute order never completes (%s)",
                            why.ok() ? "no rank can make progress" : why.message()));
      }
      size_t kept = 0;
      for (int r : active) {
        if (pos[r] < s_.programs[r].size()) active[kept++] = r;
      }
      active.resize(kept);
    }
    return out;
  }

 private:
  // Exact size of each lowered program, so that appending never reallocates.
  std::vector<size_t> LoweredSizes() const {
    std::vector<size_t> sizes(s_.num_ranks, 0);
    auto add = [&](const Action& a) {
      const int st = a.stage;
      const int rank = s_.stage_to_rank[st];
      if (a.type == ActionType::kForward && st + 1 < S_ && !SameRank(st, st + 1)) {
        ++sizes[rank];
        ++sizes[s_.stage_to_rank[st + 1]];
      } else if ((a.type == ActionType::kBackwardInput || a.type == ActionType::kFullBackward) &&
                 st > 0 && !SameRank(st, st - 1)) {
        ++sizes[rank];
        ++sizes[s_.stage_to_rank[st - 1]];
      }
    };
    for (int r = 0; r < s_.num_ranks; ++r) {
      for (const std::optional<Action>& slot : s_.programs[r]) {
        if (!slot) continue;
        ++sizes[r];
        if (slot->type == ActionType::kOverlapFB) {
          add(ForwardHalf(*slot));
          add(BackwardHalf(*slot));
        } else {
          add(*slot);
        }
      }
    }
    return sizes;
  }

  size_t Index(int stage, int mb) const { return static_cast<size_t>(stage) * M_ + mb; }
  bool SameRank(int a, int b) const { return s_.stage_to_rank[a] == s_.stage_to_rank[b]; }

  bool ReadyHalf(const Action& a) const {
    const int st = a.stage, mb = a.microbatch;
    switch (a.type) {
      case ActionType::kForward:
        return st == 0 || recv_f_placed_[Index(st, mb)] ||
               (SameRank(st - 1, st) && forward_placed_[Index(st - 1, mb)]);
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward:
        return st == S_ - 1 || recv_b_placed_[Index(st, mb)] ||
               (SameRank(st + 1, st) && backward_placed_[Index(st + 1, mb)]);
      default:
        return true;
    }
  }
  bool Ready(const Action& a) const {
    if (a.type == ActionType::kOverlapFB) {
      return ReadyHalf(ForwardHalf(a)) && ReadyHalf(BackwardHalf(a));
    }
    return ReadyHalf(a);
  }

  // Records a placed compute half and, if its output crosses ranks, appends
  // the SEND here and the RECV on the peer rank.
  void Place(const Action& a, PipelineSchedule& out) {
    const int st = a.stage, mb = a.microbatch;
    if (a.type == ActionType::kForward) {
      forward_placed_[Index(st, mb)] = 1;
      if (st + 1 < S_ && !SameRank(st, st + 1)) {
        out.programs[s_.stage_to_rank[st]].push_back(Action{st, ActionType::kSendF, mb});
        out.programs[s_.stage_to_rank[st + 1]].push_back(Action{st + 1, ActionType::kRecvF, mb});
        recv_f_placed_[Index(st + 1, mb)] = 1;
      }
    } else if (a.type == ActionType::kBackwardInput || a.type == ActionType::kFullBackward) {
      backward_placed_[Index(st, mb)] = 1;
      if (st > 0 && !SameRank(st, st - 1)) {
        out.programs[s_.stage_to_rank[st]].push_back(Action{st, ActionType::kSendB, mb});
        out.programs[s_.stage_to_rank[st - 1]].push_back(Action{st - 1, ActionType::kRecvB, mb});
        recv_b_placed_[Index(st - 1, mb)] = 1;
      }
    }
  }

  const PipelineSchedule& s_;
  const int S_, M_;
  std::vector<uint8_t> forward_placed_, backward_placed_, recv_f_placed_, recv_b_placed_;
};

}  // namespace

absl::StatusOr<PipelineSchedule> InsertSendRecv(const PipelineSchedule& compute_only) {
  if (absl::Status st = internal::CheckShape(compute_only); !st.ok()) return st;
  if (compute_only.HasCommunication()) {
    return absl::InvalidArgumentError(
        "InsertSendRecv expects a compute-only schedule, but it already has SEND/RECV actions");
  }
  return SendRecvInserter(compute_only).Run();
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
