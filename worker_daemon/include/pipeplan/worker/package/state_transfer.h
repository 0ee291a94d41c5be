// Moves per-parameter training state to its new owners at a plan switch.
//
// State is opaque bytes per canonical parameter name (the parameter and its
// optimizer state as a tensor record, tensor_record.h). Every record crosses
// the wire as it is, from the memory it lies in (a pack's view): no copy,
// no pickling, all of a rank's sends and receives in flight at once. Under the old
// plan a name is held by `from[name]` (several ranks for a tied parameter,
// whose copies are identical), under the new one by `to[name]`. The lowest
// old owner sends the bytes to every new owner, so tied copies stay
// identical; nothing goes through a shared filesystem.
//
// Every rank of the transport calls MoveState with the same owner maps and
// epoch. Rank numbers are the transport's.
#ifndef PIPEPLAN_WORKER_STATE_TRANSFER_H_
#define PIPEPLAN_WORKER_STATE_TRANSFER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/client/model_package.h"
#include "pipeplan/worker/package/state_pack.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

// Canonical parameter name -> that parameter's serialized state.
using NamedState = std::map<std::string, std::vector<std::byte>>;

// Returns the state of every name this rank owns under `to`.
// INVALID_ARGUMENT when a name of `to` has no owner in `from`;
// FAILED_PRECONDITION when this rank should send a name `mine` lacks;
// transport errors as they come.
absl::StatusOr<NamedState> MoveState(Transport& transport, const NamedStateView& mine,
                                     const ParameterOwners& from, const ParameterOwners& to,
                                     uint64_t epoch, absl::Duration timeout);
absl::StatusOr<NamedState> MoveState(Transport& transport, const NamedState& mine,
                                     const ParameterOwners& from, const ParameterOwners& to,
                                     uint64_t epoch, absl::Duration timeout);

// Views of `state`'s blobs.
NamedStateView ViewsOf(const NamedState& state);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_STATE_TRANSFER_H_
