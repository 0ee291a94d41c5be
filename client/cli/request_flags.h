// The graph, cluster and option flags shared by `plan` (offline and remote)
// and `jobs create`, turned into a PlanRequest.
#ifndef PIPEPLAN_CLIENT_CLI_REQUEST_FLAGS_H_
#define PIPEPLAN_CLIENT_CLI_REQUEST_FLAGS_H_

#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flags.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::cli {

// Valued flags RequestFromFlags reads.
const std::set<std::string>& PlanRequestFlagNames();
// Their old names, still accepted with a deprecation note: --stages (which
// always counted ranks) for --ranks, --chunks for --chunks-per-rank.
const Flags::Aliases& DeprecatedPlanFlagNames();

// Reads --graph and --cluster JSON and the option flags. Errors name the file
// or flag.
absl::StatusOr<v1::PlanRequest> RequestFromFlags(const Flags& flags);

absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_REQUEST_FLAGS_H_
