#include "engine.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "event_times.h"

namespace pipeplan::schedule::internal {
namespace {

class Engine : private EventTimes {
 public:
  Engine(const PipelineSchedule& s, bool comms, const StageCosts* costs, bool record)
      : EventTimes(s, comms, costs),
        record_(record),
        cursor_(s.num_ranks, 0),
        clock_(s.num_ranks, 0.0),
        busy_(s.num_ranks, 0.0),
        blocked_(s.num_ranks, 0) {}

  absl::StatusOr<EngineRun> Run() {
    std::vector<int> work;
    work.reserve(s_.num_ranks);
    for (int r = s_.num_ranks - 1; r >= 0; --r) work.push_back(r);
    while (!work.empty()) {
      const int r = work.back();
      work.pop_back();
      if (!RunRank(r, work)) blocked_[r] = 1;
    }
    for (int r = 0; r < s_.num_ranks; ++r) {
      if (cursor_[r] < s_.programs[r].size()) return DeadlockError(r);
    }
    return FinishedRun(std::move(busy_), std::move(clock_), makespan_, std::move(timeline_));
  }

 private:
  void Wake(int stage, std::vector<int>& work) {
    if (stage < 0 || stage >= S_) return;
    const int r = s_.stage_to_rank[stage];
    if (blocked_[r]) {
      blocked_[r] = 0;
      work.push_back(r);
    }
  }

  // Marks a compute half finished at `end` and wakes the rank that may be
  // waiting for it on the far side of the hop.
  void Finish(const Action& a, double end, std::vector<int>& work) { Wake(MarkDone(a, end), work); }

  void Record(int rank, size_t step, const Action& a, double start, double end) {
    if (record_) timeline_.push_back({rank, static_cast<int>(step), a, start, end});
  }

  // Runs rank r until it finishes (true) or blocks (false).
  bool RunRank(int r, std::vector<int>& work) {
    const RankProgram& program = s_.programs[r];
    size_t& cur = cursor_[r];
    for (; cur < program.size(); ++cur) {
      if (!program[cur]) continue;
      if (!RunAction(r, cur, *program[cur], work)) return false;
    }
    return true;
  }

  // Runs action `a`, slot `cur` of rank r, on the rank's clock; false (and
  // nothing changed) while an input it needs has not happened.
  bool RunAction(int r, size_t cur, const Action& a, std::vector<int>& work) {
    switch (a.type) {
      case ActionType::kForward:
      case ActionType::kBackwardInput:
      case ActionType::kBackwardWeight:
      case ActionType::kFullBackward:
      case ActionType::kOverlapFB:
        return RunCompute(r, cur, a, work);
      case ActionType::kSendF:
      case ActionType::kSendB:
        return RunSend(r, cur, a, work);
      case ActionType::kRecvF:
      case ActionType::kRecvB:
        return RunRecv(r, cur, a);
    }
    return true;
  }

  // F, I, W, B, or an OVERLAP_F_B whose two halves finish together.
  bool RunCompute(int r, size_t cur, const Action& a, std::vector<int>& work) {
    double& clock = clock_[r];
    const double ready = ComputeReady(a);
    if (ready < 0) return false;
    const double start = std::max(clock, ready);
    const double dur = Duration(a);
    clock = start + dur;
    busy_[r] += dur;
    ForEachHalf(a, [&](const Action& half) { Finish(half, clock, work); });
    Record(r, cur, a, start, clock);
    return true;
  }

  bool RunSend(int r, size_t cur, const Action& a, std::vector<int>& work) {
    const double post = PostSend(a, clock_[r]);
    if (post < 0) return false;
    // The rank is held for the host part of posting.
    clock_[r] = post + SendHost(a.stage);
    Wake(PeerStage(a), work);
    Record(r, cur, a, post, Arrival(a, post));
    return true;
  }

  bool RunRecv(int r, size_t cur, const Action& a) {
    double& clock = clock_[r];
    const double end = LandRecv(a, clock);
    if (end < 0) return false;
    makespan_ = std::max(makespan_, end);
    Record(r, cur, a, clock, end);
    clock += RecvHost(a.stage);
    return true;
  }

  // The action `a` waits for that has not happened yet (for error messages).
  std::optional<Action> Missing(const Action& a) {
    const int st = a.stage, mb = a.microbatch;
    auto backward_of = [&](int stage) {
      // Name whichever backward the schedule actually uses for that stage.
      const Action i{stage, ActionType::kBackwardInput, mb};
      return Locate(i).first >= 0 ? i : Action{stage, ActionType::kFullBackward, mb};
    };
    switch (a.type) {
      case ActionType::kForward:
        if (InputsReady(a) >= 0) return std::nullopt;
        if (!SameRank(st - 1, st) && comms_) return Action{st, ActionType::kRecvF, mb};
        return Action{st - 1, ActionType::kForward, mb};
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward:
        if (InputsReady(a) >= 0) return std::nullopt;
        if (At(kForwardDone, st, mb) < 0) return Action{st, ActionType::kForward, mb};
        if (!SameRank(st + 1, st) && comms_) return Action{st, ActionType::kRecvB, mb};
        return backward_of(st + 1);
      case ActionType::kBackwardWeight:
        return Action{st, ActionType::kBackwardInput, mb};
      case ActionType::kOverlapFB: {
        std::optional<Action> f = Missing(ForwardHalf(a));
        return f ? f : Missing(BackwardHalf(a));
      }
      case ActionType::kSendF:
        return Action{st, ActionType::kForward, mb};
      case ActionType::kSendB:
        return backward_of(st);
      case ActionType::kRecvF:
        return Action{st - 1, ActionType::kSendF, mb};
      case ActionType::kRecvB:
        return Action{st + 1, ActionType::kSendB, mb};
    }
    return std::nullopt;
  }

  // (rank, step) of the action (or the overlap containing it), or (-1, -1).
  std::pair<int, int> Locate(const Action& want) const {
    const int r = s_.stage_to_rank[want.stage];
    const RankProgram& program = s_.programs[r];
    for (int i = 0; i < static_cast<int>(program.size()); ++i) {
      if (!program[i]) continue;
      const Action& a = *program[i];
      if (a == want) return {r, i};
      if (a.type == ActionType::kOverlapFB && (ForwardHalf(a) == want || BackwardHalf(a) == want)) {
        return {r, i};
      }
    }
    return {-1, -1};
  }

  absl::Status DeadlockError(int r) {
    const int step = static_cast<int>(cursor_[r]);
    const Action& a = *s_.programs[r][step];
    std::string why = "a dependency that never completes";
    if (std::optional<Action> need = Missing(a)) {
      const auto [nr, ns] = Locate(*need);
      std::string where;
      if (nr < 0) {
        where = "which is not in the schedule";
      } else if (nr == r) {
        where = absl::StrFormat("which rank %d only runs later, at step %d", r, ns);
      } else {
        where = absl::StrFormat("which is at rank %d step %d and never runs either", nr, ns);
      }
      why = absl::StrFormat("%s, %s", ActionToString(*need), where);
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("schedule deadlocks: rank %d step %d (%s) can never run: it needs %s", r,
                        step, ActionToString(a), why));
  }

  const bool record_;
  std::vector<size_t> cursor_;
  std::vector<double> clock_;
  std::vector<double> busy_;
  std::vector<char> blocked_;
  double makespan_ = 0;
  std::vector<TimelineEvent> timeline_;
};

}  // namespace

absl::StatusOr<EngineRun> Execute(const PipelineSchedule& schedule, bool has_communication,
                                  const StageCosts* costs, bool record_timeline) {
  return Engine(schedule, has_communication, costs, record_timeline).Run();
}

EngineRun FinishedRun(std::vector<double> busy, std::vector<double> clock, double last_arrival,
                      std::vector<TimelineEvent> timeline) {
  EngineRun run;
  run.makespan = last_arrival;
  for (double c : clock) run.makespan = std::max(run.makespan, c);
  run.busy_seconds = std::move(busy);
  run.finish_seconds = std::move(clock);
  run.timeline = std::move(timeline);
  return run;
}

}  // namespace pipeplan::schedule::internal
