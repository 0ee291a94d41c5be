#include "structure.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace pipeplan::schedule::internal {
namespace {

std::string Where(int rank, int step, const Action& a) {
  return absl::StrFormat("rank %d step %d (%s)", rank, step, ActionToString(a));
}

// Checks one simple (non-overlap) action's indices, placement and, for
// communication, that its hop really crosses ranks.
absl::Status CheckSimple(const PipelineSchedule& s, int rank, int step, const Action& whole,
                         const Action& a) {
  if (a.stage < 0 || a.stage >= s.num_stages) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: stage %d is out of range [0, %d)", Where(rank, step, whole), a.stage, s.num_stages));
  }
  if (a.microbatch < 0 || a.microbatch >= s.num_microbatches) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: microbatch %d is out of range [0, %d)",
                                                      Where(rank, step, whole), a.microbatch,
                                                      s.num_microbatches));
  }
  if (s.stage_to_rank[a.stage] != rank) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: stage %d is placed on rank %d, not rank %d", Where(rank, step, whole),
                        a.stage, s.stage_to_rank[a.stage], rank));
  }
  if (!IsCommunication(a.type)) return absl::OkStatus();
  const int peer = PeerStage(a);
  if (peer < 0 || peer >= s.num_stages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: stage %d has no neighbour stage %d to talk to",
                        Where(rank, step, whole), a.stage, peer));
  }
  if (s.stage_to_rank[peer] == rank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: stages %d and %d are both on rank %d and exchange data locally; remove the "
        "SEND/RECV",
        Where(rank, step, whole), a.stage, peer, rank));
  }
  return absl::OkStatus();
}

// Checks one slot; on failure returns the detailed error.
inline absl::Status CheckSlot(const PipelineSchedule& s, int rank, int step, const Action& a) {
  if (a.type == ActionType::kOverlapFB) {
    const Action f = ForwardHalf(a), b = BackwardHalf(a);
    if (SimpleOk(s, rank, f) && SimpleOk(s, rank, b)) return absl::OkStatus();
    if (absl::Status st = CheckSimple(s, rank, step, a, f); !st.ok()) return st;
    return CheckSimple(s, rank, step, a, b);
  }
  if (SimpleOk(s, rank, a)) return absl::OkStatus();
  return CheckSimple(s, rank, step, a, a);
}

}  // namespace

absl::Status CheckHeader(const PipelineSchedule& s) {
  if (s.num_ranks < 1 || s.num_stages < 1 || s.num_microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "schedule needs at least one rank, stage and microbatch (ranks=%d stages=%d "
        "microbatches=%d)",
        s.num_ranks, s.num_stages, s.num_microbatches));
  }
  if (static_cast<int>(s.programs.size()) != s.num_ranks) {
    return absl::InvalidArgumentError(absl::StrFormat("schedule has %d rank programs for %d ranks",
                                                      s.programs.size(), s.num_ranks));
  }
  if (static_cast<int>(s.stage_to_rank.size()) != s.num_stages) {
    return absl::InvalidArgumentError(absl::StrFormat("stage_to_rank has %d entries for %d stages",
                                                      s.stage_to_rank.size(), s.num_stages));
  }
  if (int64_t{s.num_stages} * s.num_microbatches > (int64_t{1} << 28)) {
    return absl::InvalidArgumentError("schedule is too large (stages * microbatches > 2^28)");
  }
  for (int st = 0; st < s.num_stages; ++st) {
    if (s.stage_to_rank[st] < 0 || s.stage_to_rank[st] >= s.num_ranks) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stage %d is mapped to rank %d, outside [0, %d)", st, s.stage_to_rank[st], s.num_ranks));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckShape(const PipelineSchedule& s) {
  if (absl::Status st = CheckHeader(s); !st.ok()) return st;
  for (int r = 0; r < s.num_ranks; ++r) {
    const RankProgram& program = s.programs[r];
    for (int i = 0; i < static_cast<int>(program.size()); ++i) {
      if (!program[i]) continue;
      if (absl::Status st = CheckSlot(s, r, i, *program[i]); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

namespace {

enum Counter { kF, kBackward, kI, kW, kSendF, kRecvF, kSendB, kRecvB, kNumCounters };
constexpr const char* kWhat[kNumCounters] = {
    "forward", "backward (B or I)", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
constexpr Counter kCounterOf[] = {kF, kI, kW, kBackward, kSendF, kRecvF, kSendB, kRecvB, kF};

// How often each kind of action names each (stage, microbatch): at most
// once as actions are added, exactly once (communication only across ranks,
// and only when the schedule has any) when Complete checks.
class ActionCounts {
 public:
  explicit ActionCounts(const PipelineSchedule& s)
      : s_(s), M_(s.num_microbatches), counts_(static_cast<size_t>(s.num_stages) * M_) {}

  // Counts `a`, slot i of rank r or half of the OVERLAP_F_B `whole` there.
  absl::Status Add(int r, int i, const Action& whole, const Action& a) {
    Counter c = kCounterOf[static_cast<int>(a.type)];
    if (c == kI) {
      ++count(kI, a);
      c = kBackward;
    }
    comms_ |= c >= kSendF;
    if (++count(c, a) > 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: stage %d microbatch %d gets a second %s", Where(r, i, whole),
                          a.stage, a.microbatch, kWhat[c]));
    }
    return absl::OkStatus();
  }

  bool comms() const { return comms_; }

  absl::Status Complete() {
    for (int st = 0; st < s_.num_stages; ++st) {
      for (int mb = 0; mb < M_; ++mb) {
        if (absl::Status status = CompleteCompute(st, mb); !status.ok()) return status;
        if (!comms_ || st + 1 == s_.num_stages) continue;
        if (s_.stage_to_rank[st + 1] == s_.stage_to_rank[st]) continue;
        if (absl::Status status = CompleteHop(st, mb); !status.ok()) return status;
      }
    }
    return absl::OkStatus();
  }

 private:
  // All counters of one (stage, microbatch) share a cache line.
  uint8_t& count(Counter c, const Action& a) {
    return counts_[static_cast<size_t>(a.stage) * M_ + a.microbatch][c];
  }

  absl::Status CompleteCompute(int st, int mb) {
    const Action at{st, ActionType::kForward, mb};
    if (count(kF, at) == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stage %d microbatch %d has no forward (F)", st, mb));
    }
    if (count(kBackward, at) == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("stage %d microbatch %d has no backward (B, or I and W)", st, mb));
    }
    if (count(kI, at) != count(kW, at)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stage %d microbatch %d has %s; a split backward needs exactly one I and one W", st, mb,
          count(kI, at) ? "an I but no W" : "a W without an I (use B for a full backward)"));
    }
    return absl::OkStatus();
  }

  // Stage st -> st + 1 crosses ranks: four communication actions.
  absl::Status CompleteHop(int st, int mb) {
    const Action at{st, ActionType::kForward, mb};
    const Action next{st + 1, ActionType::kForward, mb};
    if (count(kSendF, at) == 0 || count(kRecvF, next) == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stage %d -> %d crosses ranks but microbatch %d is missing its %s", st, st + 1, mb,
          count(kSendF, at) == 0 ? absl::StrFormat("%dSEND_F%d", st, mb)
                                 : absl::StrFormat("%dRECV_F%d", st + 1, mb)));
    }
    if (count(kSendB, next) == 0 || count(kRecvB, at) == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stage %d -> %d crosses ranks but microbatch %d is missing its %s", st + 1, st, mb,
          count(kSendB, next) == 0 ? absl::StrFormat("%dSEND_B%d", st + 1, mb)
                                   : absl::StrFormat("%dRECV_B%d", st, mb)));
    }
    return absl::OkStatus();
  }

  const PipelineSchedule& s_;
  const int M_;
  std::vector<std::array<uint8_t, kNumCounters>> counts_;
  bool comms_ = false;
};

}  // namespace

absl::Status CheckStructure(const PipelineSchedule& s, bool* has_communication) {
  if (absl::Status st = CheckHeader(s); !st.ok()) return st;
  ActionCounts counts(s);
  for (int r = 0; r < s.num_ranks; ++r) {
    const RankProgram& program = s.programs[r];
    for (int i = 0; i < static_cast<int>(program.size()); ++i) {
      if (!program[i]) continue;
      const Action& whole = *program[i];
      if (absl::Status st = CheckSlot(s, r, i, whole); !st.ok()) return st;
      if (whole.type == ActionType::kOverlapFB) {
        if (absl::Status st = counts.Add(r, i, whole, ForwardHalf(whole)); !st.ok()) return st;
        if (absl::Status st = counts.Add(r, i, whole, BackwardHalf(whole)); !st.ok()) return st;
      } else if (absl::Status st = counts.Add(r, i, whole, whole); !st.ok()) {
        return st;
      }
    }
  }
  *has_communication = counts.comms();
  return counts.Complete();
}

}  // namespace pipeplan::schedule::internal
