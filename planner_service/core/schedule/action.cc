#include "pipeplan/core/schedule/action.h"

#include <array>
#include <cctype>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "pipeplan/common/enum_names.h"
#include "string_util.h"

namespace pipeplan::schedule {
namespace {

using internal::StripWhitespace;
using internal::ToAbsl;

constexpr std::string_view kOverlapName = "OVERLAP_F_B";

// Multi-letter names are tried first so that adding a type whose name starts
// with F/I/W/B can never be shadowed by the one-letter compute types. The
// overlap is printed by name but parsed only in its bracketed form.
constexpr auto kTypeNames =
    MakeEnumNames<ActionType>("?", {{ActionType::kSendF, "SEND_F"},
                                    {ActionType::kRecvF, "RECV_F"},
                                    {ActionType::kSendB, "SEND_B"},
                                    {ActionType::kRecvB, "RECV_B"},
                                    {ActionType::kForward, "F"},
                                    {ActionType::kBackwardInput, "I"},
                                    {ActionType::kBackwardWeight, "W"},
                                    {ActionType::kFullBackward, "B"},
                                    {ActionType::kOverlapFB, kOverlapName}});

// Reads a non-negative decimal integer prefix of `text`.
bool ConsumeInt(std::string_view& text, int& value) {
  size_t n = 0;
  while (n < text.size() && std::isdigit(static_cast<unsigned char>(text[n]))) ++n;
  if (n == 0 || n > 9) return false;
  if (!absl::SimpleAtoi(ToAbsl(text.substr(0, n)), &value)) return false;
  text.remove_prefix(n);
  return true;
}

absl::StatusOr<Action> ParseSimpleAction(std::string_view original) {
  std::string_view text = StripWhitespace(original);
  Action action;
  int stage = 0;
  if (!ConsumeInt(text, stage)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid action '%s': expected [stage][type][microbatch], e.g. 2F0", original));
  }
  if (stage >= kMaxStages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid action '%s': stage %d is beyond the largest supported stage "
                        "index %d",
                        original, stage, kMaxStages - 1));
  }
  action.stage = stage;
  for (const auto& [type, name] : kTypeNames.entries) {
    if (type != ActionType::kOverlapFB && text.starts_with(name)) {
      text.remove_prefix(name.size());
      action.type = type;
      if (!ConsumeInt(text, action.microbatch) || !text.empty()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "invalid action '%s': expected a microbatch index after '%s'", original, name));
      }
      return action;
    }
  }
  for (std::string_view unsupported : {"UNSHARD", "RESHARD", "REDUCE_GRAD"}) {
    if (text.starts_with(unsupported)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "action '%s': %s is not modelled by the planner; drop it from the schedule", original,
          unsupported));
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "invalid action '%s': unknown action type (want F, I, W, B, SEND_F, RECV_F, SEND_B, "
      "RECV_B or OVERLAP_F_B)",
      original));
}

}  // namespace

std::string_view ActionTypeName(ActionType type) { return kTypeNames.Name(type); }

Action MakeOverlap(int forward_stage, int forward_microbatch, int backward_stage,
                   int backward_microbatch) {
  return Action{forward_stage, ActionType::kOverlapFB, forward_microbatch, backward_stage,
                backward_microbatch};
}

std::string ActionToString(const Action& action) {
  if (action.type == ActionType::kOverlapFB) {
    return "(" + ActionToString(ForwardHalf(action)) + ";" + ActionToString(BackwardHalf(action)) +
           ")" + std::string(kOverlapName);
  }
  std::string out = std::to_string(action.stage);
  out += ActionTypeName(action.type);
  out += std::to_string(action.microbatch);
  return out;
}

absl::StatusOr<std::optional<Action>> ParseAction(std::string_view text) {
  std::string_view body = StripWhitespace(text);
  if (body.empty()) return std::optional<Action>();
  if (body.front() != '(') {
    absl::StatusOr<Action> simple = ParseSimpleAction(body);
    if (!simple.ok()) return simple.status();
    return std::optional<Action>(*simple);
  }
  // Overlapped pair: "(F-half;B-half)OVERLAP_F_B".
  body.remove_prefix(1);
  const size_t close = body.find(')');
  if (close == std::string_view::npos || body.substr(close + 1) != kOverlapName) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid action '%s': expected (xFm;yBn)OVERLAP_F_B", text));
  }
  std::string_view inner = body.substr(0, close);
  const size_t semi = inner.find(';');
  if (semi == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid action '%s': OVERLAP_F_B needs two sub-actions", text));
  }
  absl::StatusOr<Action> fwd = ParseSimpleAction(inner.substr(0, semi));
  if (!fwd.ok()) return fwd.status();
  absl::StatusOr<Action> bwd = ParseSimpleAction(inner.substr(semi + 1));
  if (!bwd.ok()) return bwd.status();
  if (fwd->type != ActionType::kForward || bwd->type != ActionType::kFullBackward) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid action '%s': OVERLAP_F_B must pair a forward with a full backward", text));
  }
  return std::optional<Action>(
      MakeOverlap(fwd->stage, fwd->microbatch, bwd->stage, bwd->microbatch));
}

std::ostream& operator<<(std::ostream& os, const Action& action) {
  return os << ActionToString(action);
}

}  // namespace pipeplan::schedule
