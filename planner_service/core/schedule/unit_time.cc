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
      : s_(s), S_(s.num_stages), M_(s.num_microbatches), placed_(kNumTypes * S_ * M_, 0) {}

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
  static constexpr size_t kNumTypes = static_cast<size_t>(ActionType::kOverlapFB) + 1;

  // Whether the action of this type and (stage, microbatch) has been placed.
  // An I or a B is recorded as B: either is the backward a later action waits
  // for. Nothing waits on a W, and an overlap is recorded as its halves.
  uint8_t& Placed(ActionType type, int stage, int mb) {
    return placed_[(static_cast<size_t>(type) * S_ + stage) * M_ + mb];
  }
  bool SameRank(int a, int b) const { return s_.stage_to_rank[a] == s_.stage_to_rank[b]; }

  bool Ready(const Action& a) {
    const int st = a.stage, mb = a.microbatch;
    switch (a.type) {
      case ActionType::kForward:
        return st == 0 || Placed(ActionType::kRecvF, st, mb) ||
               (SameRank(st - 1, st) && Placed(ActionType::kForward, st - 1, mb));
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward:
        return st == S_ - 1 || Placed(ActionType::kRecvB, st, mb) ||
               (SameRank(st + 1, st) && Placed(ActionType::kFullBackward, st + 1, mb));
      case ActionType::kBackwardWeight:
        return true;
      case ActionType::kSendF:
        return Placed(ActionType::kForward, st, mb);
      case ActionType::kSendB:
        return Placed(ActionType::kFullBackward, st, mb);
      case ActionType::kRecvF:
        return Placed(ActionType::kSendF, st - 1, mb);
      case ActionType::kRecvB:
        return Placed(ActionType::kSendB, st + 1, mb);
      case ActionType::kOverlapFB:
        return Ready(ForwardHalf(a)) && Ready(BackwardHalf(a));
    }
    return false;
  }

  void Mark(const Action& a) {
    if (a.type == ActionType::kOverlapFB) {
      Mark(ForwardHalf(a));
      Mark(BackwardHalf(a));
    } else if (a.type == ActionType::kBackwardInput) {
      Placed(ActionType::kFullBackward, a.stage, a.microbatch) = 1;
    } else if (a.type != ActionType::kBackwardWeight) {
      Placed(a.type, a.stage, a.microbatch) = 1;
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
