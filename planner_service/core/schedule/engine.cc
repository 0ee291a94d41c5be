#include "engine.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace pipeplan::schedule::internal {
namespace {

class Engine {
 public:
  Engine(const PipelineSchedule& s, bool comms, const StageCosts* costs, bool record)
      : s_(s),
        comms_(comms),
        costs_(costs),
        record_(record),
        S_(s.num_stages),
        M_(s.num_microbatches),
        times_(static_cast<size_t>(kNumEvents) * S_ * M_, -1.0),
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
    EngineRun run;
    run.busy_seconds = std::move(busy_);
    run.makespan = makespan_;
    for (double c : clock_) run.makespan = std::max(run.makespan, c);
    run.finish_seconds = clock_;
    run.timeline = std::move(timeline_);
    return run;
  }

 private:
  // Events other actions wait for. "Backward done" means the input gradient
  // exists, i.e. I or B finished.
  enum Event { kForwardDone, kBackwardDone, kSentF, kSentB, kRecvedF, kRecvedB, kNumEvents };

  double& At(Event e, int stage, int mb) {
    // Event-minor layout: one action's reads and writes share a cache line.
    return times_[(static_cast<size_t>(stage) * M_ + mb) * kNumEvents + e];
  }
  bool SameRank(int a, int b) const { return s_.stage_to_rank[a] == s_.stage_to_rank[b]; }
  double XferF(int boundary) const {
    return costs_ && !costs_->forward_transfer.empty() ? costs_->forward_transfer[boundary] : 0;
  }
  double XferB(int boundary) const {
    return costs_ && !costs_->backward_transfer.empty() ? costs_->backward_transfer[boundary] : 0;
  }
  double SendHost(int stage) const {
    return costs_ && !costs_->send_host.empty() ? costs_->send_host[stage] : 0;
  }
  double RecvHost(int stage) const {
    return costs_ && !costs_->recv_host.empty() ? costs_->recv_host[stage] : 0;
  }
  double Duration(const Action& a) const {
    if (!costs_) return 0;
    switch (a.type) {
      case ActionType::kForward:
        return costs_->forward[a.stage];
      case ActionType::kBackwardInput:
        return costs_->backward_input[a.stage];
      case ActionType::kBackwardWeight:
        return costs_->backward_weight[a.stage];
      case ActionType::kFullBackward:
        return costs_->backward_input[a.stage] + costs_->backward_weight[a.stage];
      case ActionType::kOverlapFB:
        return Duration(ForwardHalf(a)) + Duration(BackwardHalf(a));
      default:
        return 0;
    }
  }

  // When the inputs of a simple compute action are ready, or -1 if some input
  // does not exist yet.
  double InputsReady(const Action& a) {
    const int st = a.stage, mb = a.microbatch;
    switch (a.type) {
      case ActionType::kForward: {
        if (st == 0) return 0;
        if (SameRank(st - 1, st)) return At(kForwardDone, st - 1, mb);
        if (comms_) return At(kRecvedF, st, mb);
        const double t = At(kForwardDone, st - 1, mb);
        return t < 0 ? -1 : t + XferF(st - 1);
      }
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward: {
        const double f = At(kForwardDone, st, mb);
        if (f < 0 || st == S_ - 1) return f;
        double g;
        if (SameRank(st + 1, st)) {
          g = At(kBackwardDone, st + 1, mb);
        } else if (comms_) {
          g = At(kRecvedB, st, mb);
        } else {
          g = At(kBackwardDone, st + 1, mb);
          if (g >= 0) g += XferB(st);
        }
        return g < 0 ? -1 : std::max(f, g);
      }
      case ActionType::kBackwardWeight:
        return At(kBackwardDone, st, mb);
      default:
        return -1;
    }
  }

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
  void Finish(const Action& a, double end, std::vector<int>& work) {
    if (a.type == ActionType::kForward) {
      At(kForwardDone, a.stage, a.microbatch) = end;
      Wake(a.stage + 1, work);
    } else if (a.type != ActionType::kBackwardWeight) {
      At(kBackwardDone, a.stage, a.microbatch) = end;
      Wake(a.stage - 1, work);
    }
  }

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
        return RunCompute(r, cur, a, work);
      case ActionType::kOverlapFB:
        return RunOverlap(r, cur, a, work);
      case ActionType::kSendF:
      case ActionType::kSendB:
        return RunSend(r, cur, a, work);
      case ActionType::kRecvF:
      case ActionType::kRecvB:
        return RunRecv(r, cur, a);
    }
    return true;
  }

  bool RunCompute(int r, size_t cur, const Action& a, std::vector<int>& work) {
    double& clock = clock_[r];
    const double ready = InputsReady(a);
    if (ready < 0) return false;
    const double start = std::max(clock, ready);
    const double dur = Duration(a);
    clock = start + dur;
    busy_[r] += dur;
    Finish(a, clock, work);
    Record(r, cur, a, start, clock);
    return true;
  }

  bool RunOverlap(int r, size_t cur, const Action& a, std::vector<int>& work) {
    double& clock = clock_[r];
    const Action fwd = ForwardHalf(a), bwd = BackwardHalf(a);
    const double ready_f = InputsReady(fwd);
    if (ready_f < 0) return false;
    const double ready_b = InputsReady(bwd);
    if (ready_b < 0) return false;
    const double start = std::max({clock, ready_f, ready_b});
    const double dur = Duration(a);
    clock = start + dur;
    busy_[r] += dur;
    Finish(fwd, clock, work);
    Finish(bwd, clock, work);
    Record(r, cur, a, start, clock);
    return true;
  }

  bool RunSend(int r, size_t cur, const Action& a, std::vector<int>& work) {
    double& clock = clock_[r];
    const int st = a.stage, mb = a.microbatch;
    const bool fwd = a.type == ActionType::kSendF;
    const double produced = At(fwd ? kForwardDone : kBackwardDone, st, mb);
    if (produced < 0) return false;
    const double post = std::max(clock, produced);
    At(fwd ? kSentF : kSentB, st, mb) = post;
    // The transfer starts at the post (link fits time it from there);
    // the rank is held for the host part of posting.
    clock = post + SendHost(st);
    Wake(fwd ? st + 1 : st - 1, work);
    Record(r, cur, a, post, post + (fwd ? XferF(st) : XferB(st - 1)));
    return true;
  }

  bool RunRecv(int r, size_t cur, const Action& a) {
    double& clock = clock_[r];
    const int st = a.stage, mb = a.microbatch;
    const bool fwd = a.type == ActionType::kRecvF;
    const double sent = fwd ? At(kSentF, st - 1, mb) : At(kSentB, st + 1, mb);
    if (sent < 0) return false;
    const double end = std::max(clock, sent) + (fwd ? XferF(st - 1) : XferB(st));
    At(fwd ? kRecvedF : kRecvedB, st, mb) = end;
    makespan_ = std::max(makespan_, end);
    Record(r, cur, a, clock, end);
    clock += RecvHost(st);
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

  const PipelineSchedule& s_;
  const bool comms_;
  const StageCosts* costs_;
  const bool record_;
  const int S_, M_;
  std::vector<double> times_;
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

}  // namespace pipeplan::schedule::internal
