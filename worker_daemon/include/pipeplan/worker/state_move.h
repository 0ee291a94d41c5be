// Moving training state between ranks at a plan switch.
//
// A replan moves pipeline stages, and with them the parameters and optimizer
// state they own. No shared filesystem is assumed: every piece of state,
// keyed by the parameter's canonical name, travels over a Transport whose
// members are every worker that sends or receives. The caller decides which
// transport (the old plan's when the new devices are a subset of the old,
// else the new one's) and who owns what; this file only plans the messages
// and runs them.
//
// Protocol: one message pair per (sender, receiver) that has anything to
// move: an 8-byte length, then the payload, which is the concatenation, in
// name order, of [8-byte length][state bytes] for every name that pair moves.
// Both sides derive the same name order from the same MovePlan, so nothing
// else is negotiated. Tags live above 2^61, away from the runtime's.
#ifndef PIPEPLAN_WORKER_STATE_MOVE_H_
#define PIPEPLAN_WORKER_STATE_MOVE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/worker/transport.h"

namespace pipeplan::worker {

// Who holds each piece of state before and after, as transport members.
struct MovePlan {
  struct Item {
    std::string name;
    // The member that sends it (one holder of the old copy; tied copies are
    // equal); -1 when no member holds it.
    int source = -1;
    // Members that must hold it afterwards.
    std::vector<int> targets;
  };
  std::vector<Item> items;  // sorted by name

  // `old_holders` / `new_holders`: per name, the members holding it before
  // and after. The source is the lowest old holder (a target that already
  // holds it keeps its own copy and receives nothing). INVALID_ARGUMENT when
  // a name some member needs has no old holder.
  static absl::StatusOr<MovePlan> Build(const std::map<std::string, std::vector<int>>& old_holders,
                                        const std::map<std::string, std::vector<int>>& new_holders);
};

// Runs `plan` as member transport.rank(): sends the entries of `local` that
// others need and returns what this member must hold afterwards that it did
// not hold before (name -> bytes). A name this member sends must be in
// `local` (INVALID_ARGUMENT otherwise, before anything is sent). Transport
// errors come back as they are (UNAVAILABLE, DEADLINE_EXCEEDED), a payload
// that does not parse as DATA_LOSS.
absl::StatusOr<std::map<std::string, std::string>> MoveState(
    Transport& transport, const MovePlan& plan, const std::map<std::string, std::string>& local,
    absl::Duration timeout);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_STATE_MOVE_H_
