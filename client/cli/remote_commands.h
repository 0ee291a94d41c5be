// Commands that talk to a running pipeplan-planner: `plan` with a global
// --planner ADDR, and `jobs create|list|show|delete`.
#ifndef PIPEPLAN_CLIENT_CLI_REMOTE_COMMANDS_H_
#define PIPEPLAN_CLIENT_CLI_REMOTE_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pipeplan::cli {

// Flags given before the command.
struct GlobalFlags {
  std::string planner;  // empty: offline
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string token_file;
  double timeout_seconds = 60;
};

extern const char kRemoteUsage[];

// Consumes the leading global flags of `args` (stops at the first
// non-flag, the command).
absl::StatusOr<GlobalFlags> ParseGlobalFlags(std::vector<std::string>* args);

absl::Status RunRemotePlan(const GlobalFlags& global, const std::vector<std::string>& args);
absl::Status RunJobs(const GlobalFlags& global, const std::vector<std::string>& args);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_REMOTE_COMMANDS_H_
