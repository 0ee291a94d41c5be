// The graph, cluster and option flags shared by `plan` (offline and remote),
// `simulate`, `jobs create` and (the options only) `jobs replan`, turned
// into a PlanRequest.
#ifndef PIPEPLAN_CLIENT_CLI_REQUEST_FLAGS_H_
#define PIPEPLAN_CLIENT_CLI_REQUEST_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeplan/common/flag_set.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::cli {

// --graph FILE --cluster FILE.
const common::FlagSet& PlanInputFlags();
// --ranks (deprecated alias --stages), --microbatches, --schedule,
// --chunks-per-rank (alias --chunks), --method, --comm, ... .
const common::FlagSet& PlanOptionFlags();

// Reads --graph and --cluster JSON and the option flags. Errors name the file
// or flag.
absl::StatusOr<v1::PlanRequest> RequestFromFlags(const common::ParsedFlags& flags);

// Sets the option fields whose flags were given and leaves the others as
// they are (`jobs replan --ranks 2` keeps the schedule of the current
// version). Usage errors name the flag.
absl::Status ApplyOptionFlags(const common::ParsedFlags& flags, v1::PlanOptions* options);
// Whether any option flag was given.
bool HasOptionFlags(const common::ParsedFlags& flags);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_REQUEST_FLAGS_H_
