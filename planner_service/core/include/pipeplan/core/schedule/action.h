// Pipeline action IR.
//
// A pipeline schedule is, per rank, an ordered list of actions. The textual
// form follows torch.distributed.pipelining so that schedules can be read and
// exchanged with PyTorch users: `{stage}{F|I|W|B}{microbatch}` for compute
// (forward, backward-input, backward-weight, full backward),
// `{stage}{SEND_F|RECV_F|SEND_B|RECV_B}{microbatch}` for point-to-point
// communication, and `({stage}F{mb};{stage}B{mb})OVERLAP_F_B` for the
// overlapped forward/backward pair used by DualPipeV.
#ifndef PIPEPLAN_CORE_SCHEDULE_ACTION_H_
#define PIPEPLAN_CORE_SCHEDULE_ACTION_H_

#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pipeplan::schedule {

enum class ActionType : unsigned char {
  kForward,         // F
  kBackwardInput,   // I: gradient w.r.t. the stage input only.
  kBackwardWeight,  // W: gradient w.r.t. the stage weights; needs I first.
  kFullBackward,    // B = I + W in one action.
  kSendF,
  kRecvF,
  kSendB,
  kRecvB,
  kOverlapFB,  // A forward and a full backward issued together (DualPipeV).
};

// PyTorch's spelling of the type: "F", "I", "W", "B", "SEND_F", ...
std::string_view ActionTypeName(ActionType type);

inline bool IsCompute(ActionType type) {
  return type == ActionType::kForward || type == ActionType::kBackwardInput ||
         type == ActionType::kBackwardWeight || type == ActionType::kFullBackward ||
         type == ActionType::kOverlapFB;
}
inline bool IsCommunication(ActionType type) { return !IsCompute(type); }

// Stage indices must be below this (they are stored in 24 bits so that an
// Action, and with it every schedule, stays small). BuildSchedule and
// ParseAction reject anything larger.
inline constexpr int kMaxStages = 1 << 23;

struct Action {
  // For SEND_* the sending stage; for RECV_* the receiving stage (as in PyTorch).
  // A bit-field (see kMaxStages): reads and writes work as for an int, but it
  // cannot bind to an int&.
  int stage : 24 = 0;
  ActionType type = ActionType::kForward;
  int microbatch = 0;
  // kOverlapFB only: `stage`/`microbatch` above name the forward half and these
  // the full-backward half. Kept inline (rather than a sub-action list) so that
  // Action stays a small value type in the simulator's hot loops.
  int backward_stage = -1;
  int backward_microbatch = -1;

  friend bool operator==(const Action&, const Action&) = default;
};

// The stage a SEND/RECV talks to: activations go forward (SEND_F to s+1,
// RECV_F from s-1), gradients backward (SEND_B to s-1, RECV_B from s+1).
// -1 for compute actions. The result may be out of range for a malformed
// action; callers that take user input check it.
inline int PeerStage(const Action& a) {
  switch (a.type) {
    case ActionType::kSendF:
    case ActionType::kRecvB:
      return a.stage + 1;
    case ActionType::kRecvF:
    case ActionType::kSendB:
      return a.stage - 1;
    default:
      return -1;
  }
}

// Builds an OVERLAP_F_B action from its forward and full-backward halves.
Action MakeOverlap(int forward_stage, int forward_microbatch, int backward_stage,
                   int backward_microbatch);
// The two halves of an OVERLAP_F_B action.
inline Action ForwardHalf(const Action& a) {
  return Action{a.stage, ActionType::kForward, a.microbatch};
}
inline Action BackwardHalf(const Action& a) {
  return Action{a.backward_stage, ActionType::kFullBackward, a.backward_microbatch};
}
// Calls fn(action) on `a`, or on both halves of an OVERLAP_F_B, the forward
// first: both are live at once, the new forward allocating before the
// backward frees.
template <typename Fn>
void ForEachHalf(const Action& a, Fn&& fn) {
  if (a.type == ActionType::kOverlapFB) {
    fn(ForwardHalf(a));
    fn(BackwardHalf(a));
  } else {
    fn(a);
  }
}

// "1SEND_F3", "0F0", "(0F3;3B1)OVERLAP_F_B".
std::string ActionToString(const Action& action);
// Inverse of ActionToString. Surrounding whitespace is ignored; an empty string
// is an idle slot and yields std::nullopt. FSDP/gradient-reduction actions that
// PyTorch also knows (UNSHARD, RESHARD, REDUCE_GRAD) are rejected because the
// planner does not model them.
absl::StatusOr<std::optional<Action>> ParseAction(std::string_view text);

std::ostream& operator<<(std::ostream& os, const Action& action);

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_ACTION_H_
