// When each (stage, microbatch) event of a schedule happened, and the rules
// that turn those times into the readiness of an action.
//
// Shared by the dependency-driven engine (engine.cc) and the time-ordered
// shared-pool engine (shared_engine.cc): both must agree on what a compute
// waits for, when a message is posted and when it lands, so those rules live
// here once. A time of -1 means "has not happened (yet)".
#ifndef PIPEPLAN_CORE_SCHEDULE_EVENT_TIMES_H_
#define PIPEPLAN_CORE_SCHEDULE_EVENT_TIMES_H_

#include <algorithm>
#include <vector>

#include "pipeplan/core/schedule/action.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan::schedule::internal {

class EventTimes {
 public:
  // Events other actions wait for. "Backward done" means the input gradient
  // exists, i.e. I or B finished.
  enum Event { kForwardDone, kBackwardDone, kSentF, kSentB, kRecvedF, kRecvedB, kNumEvents };

  // `costs` may be null (every duration zero: ordering only).
  EventTimes(const PipelineSchedule& s, bool comms, const StageCosts* costs)
      : s_(s),
        comms_(comms),
        costs_(costs),
        S_(s.num_stages),
        M_(s.num_microbatches),
        times_(static_cast<size_t>(kNumEvents) * S_ * M_, -1.0) {}

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
  // Seconds a compute takes alone on its processor.
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

  // When an OVERLAP_F_B can start: both halves' inputs ready, or -1.
  double OverlapReady(const Action& a) {
    const double f = InputsReady(ForwardHalf(a));
    if (f < 0) return -1;
    const double b = InputsReady(BackwardHalf(a));
    return b < 0 ? -1 : std::max(f, b);
  }

  // When compute action `a` (F, I, W, B or an overlap) can start, or -1.
  double ComputeReady(const Action& a) {
    return a.type == ActionType::kOverlapFB ? OverlapReady(a) : InputsReady(a);
  }

  // Marks a compute half finished at `end`; returns the stage whose rank may
  // be waiting for it on the far side of the hop (possibly out of range), or
  // -1 when nobody waits (W).
  int MarkDone(const Action& a, double end) {
    if (a.type == ActionType::kForward) {
      At(kForwardDone, a.stage, a.microbatch) = end;
      return a.stage + 1;
    }
    if (a.type == ActionType::kBackwardWeight) return -1;
    At(kBackwardDone, a.stage, a.microbatch) = end;
    return a.stage - 1;
  }

  // Posts SEND `a` on a rank free at `clock`: returns the post time, or -1
  // (nothing changed) while its data is not produced. The transfer starts at
  // the post (link fits time it from there).
  double PostSend(const Action& a, double clock) {
    const bool fwd = a.type == ActionType::kSendF;
    const double produced = At(fwd ? kForwardDone : kBackwardDone, a.stage, a.microbatch);
    if (produced < 0) return -1;
    const double post = std::max(clock, produced);
    At(fwd ? kSentF : kSentB, a.stage, a.microbatch) = post;
    return post;
  }
  // The earliest a SEND posted at `post` can land.
  double Arrival(const Action& send, double post) const {
    return post + (send.type == ActionType::kSendF ? XferF(send.stage) : XferB(send.stage - 1));
  }

  // Lands RECV `a` posted at `posted`: the transfer starts once both ends are
  // posted. Returns when the data is in place, or -1 (nothing changed) while
  // the matching SEND is not posted.
  double LandRecv(const Action& a, double posted) {
    const int st = a.stage, mb = a.microbatch;
    const bool fwd = a.type == ActionType::kRecvF;
    const double sent = fwd ? At(kSentF, st - 1, mb) : At(kSentB, st + 1, mb);
    if (sent < 0) return -1;
    const double end = std::max(posted, sent) + (fwd ? XferF(st - 1) : XferB(st));
    At(fwd ? kRecvedF : kRecvedB, st, mb) = end;
    return end;
  }

 protected:
  const PipelineSchedule& s_;
  const bool comms_;
  const StageCosts* costs_;
  const int S_, M_;

 private:
  std::vector<double> times_;
};

}  // namespace pipeplan::schedule::internal

#endif  // PIPEPLAN_CORE_SCHEDULE_EVENT_TIMES_H_
