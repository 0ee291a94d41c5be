#include "pipeplan/core/schedule/unit_time.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pipeplan/core/schedule/lowering.h"
#include "structure.h"

namespace pipeplan::schedule {
namespace {

class UnitTimeSimulator {
 public:
  explicit UnitTimeSimulator(const PipelineSchedule& s)
      : s_(s),
        S_(s.num_stages),
        M_(s.num_microbatches),
        placed_(static_cast<size_t>(kNumKinds) * S_ * M_, 0) {}

  absl::StatusOr<UnitTimeResult> Run() {
    const int p = s_.num_ranks;
    // PyTorch drops idle slots before simulating.
    std::vector<std::vector<Action>> pending(p);
    std::vector<size_t> pos(p, 0);
    std::vector<int> active;
    for (int r = 0; r < p; ++r) {
      for (const std::optional<Action>& slot : s_.programs[r]) {
        if (slot) pending[r].push_back(*slot);
      }
      if (!pending[r].empty()) active.push_back(r);
    }
    UnitTimeResult result;
    result.num_ranks = p;
    auto drop_finished = [&] {
      size_t kept = 0;
      for (int r : active) {
        if (pos[r] < pending[r].size()) active[kept++] = r;
      }
      active.resize(kept);
    };
    while (!active.empty()) {
      std::vector<std::optional<Action>> row(p);
      bool progress = false;
      for (int r : active) {
        const Action& a = pending[r][pos[r]];
        if (!Ready(a)) continue;
        row[r] = a;
        Mark(a);
        ++pos[r];
        progress = true;
      }
      drop_finished();
      // Second chance for ranks that idled this step: a higher rank may have
      // unblocked them.
      for (int r : active) {
        if (row[r]) continue;
        const Action& a = pending[r][pos[r]];
        if (!Ready(a)) continue;
        row[r] = a;
        Mark(a);
        ++pos[r];
      }
      drop_finished();
      if (!progress) {
        std::vector<std::string> heads;
        for (int r : active) {
          heads.push_back(absl::StrFormat("rank %d at %s", r, ActionToString(pending[r][pos[r]])));
        }
        return absl::InvalidArgumentError(
            absl::StrFormat("unit-time simulation is not progressing at step %d: %s",
                            result.steps.size(), absl::StrJoin(heads, ", ")));
      }
      result.steps.push_back(std::move(row));
    }
    return result;
  }

 private:
  enum Kind { kF, kBackward, kSentF, kSentB, kRecvedF, kRecvedB, kNumKinds };

  uint8_t& Placed(Kind k, int stage, int mb) {
    return placed_[(static_cast<size_t>(k) * S_ + stage) * M_ + mb];
  }
  bool SameRank(int a, int b) const { return s_.stage_to_rank[a] == s_.stage_to_rank[b]; }

  bool Ready(const Action& a) {
    const int st = a.stage, mb = a.microbatch;
    switch (a.type) {
      case ActionType::kForward:
        return st == 0 || Placed(kRecvedF, st, mb) ||
               (SameRank(st - 1, st) && Placed(kF, st - 1, mb));
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward:
        return st == S_ - 1 || Placed(kRecvedB, st, mb) ||
               (SameRank(st + 1, st) && Placed(kBackward, st + 1, mb));
      case ActionType::kBackwardWeight:
        return true;
      case ActionType::kSendF:
        return Placed(kF, st, mb);
      case ActionType::kSendB:
        return Placed(kBackward, st, mb);
      case ActionType::kRecvF:
        return Placed(kSentF, st - 1, mb);
      case ActionType::kRecvB:
        return Placed(kSentB, st + 1, mb);
      case ActionType::kOverlapFB:
        return Ready(ForwardHalf(a)) && Ready(BackwardHalf(a));
    }
    return false;
  }

  void Mark(const Action& a) {
    const int st = a.stage, mb = a.microbatch;
    switch (a.type) {
      case ActionType::kForward:
        Placed(kF, st, mb) = 1;
        break;
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward:
        Placed(kBackward, st, mb) = 1;
        break;
      case ActionType::kBackwardWeight:
        break;
      case ActionType::kSendF:
        Placed(kSentF, st, mb) = 1;
        break;
      case ActionType::kSendB:
        Placed(kSentB, st, mb) = 1;
        break;
      case ActionType::kRecvF:
        Placed(kRecvedF, st, mb) = 1;
        break;
      case ActionType::kRecvB:
        Placed(kRecvedB, st, mb) = 1;
        break;
      case ActionType::kOverlapFB:
        Mark(ForwardHalf(a));
        Mark(BackwardHalf(a));
        break;
    }
  }

  const PipelineSchedule& s_;
  const int S_, M_;
  std::vector<uint8_t> placed_;
};

bool CrossesRanks(const PipelineSchedule& s) {
  for (int st = 0; st + 1 < s.num_stages; ++st) {
    if (s.stage_to_rank[st] != s.stage_to_rank[st + 1]) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<UnitTimeResult> SimulateUnitTime(const PipelineSchedule& schedule) {
  if (absl::Status st = internal::CheckShape(schedule); !st.ok()) return st;
  if (!schedule.HasCommunication() && CrossesRanks(schedule)) {
    absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(schedule);
    if (!lowered.ok()) return lowered.status();
    return UnitTimeSimulator(*lowered).Run();
  }
  return UnitTimeSimulator(schedule).Run();
}

std::string FormatUnitTimeline(const UnitTimeResult& result) {
  std::string out;
  for (const auto& row : result.steps) {
    out += absl::StrJoin(row, "|", [](std::string* s, const std::optional<Action>& a) {
      s->append(a ? ActionToString(*a) : "-");
    });
    out.push_back('\n');
  }
  return out;
}

}  // namespace pipeplan::schedule
