// The `pipeplan` flags every command takes, before or after the command
// words: where the planner is and how to reach it, the output format
// (-o json|table, --json) and --version.
#ifndef PIPEPLAN_CLIENT_CLI_GLOBAL_FLAGS_H_
#define PIPEPLAN_CLIENT_CLI_GLOBAL_FLAGS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/common/flag_set.h"

namespace pipeplan::cli {

enum class Output { kTable, kJson };

struct GlobalFlags {
  std::string planner;  // empty: offline
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string token_file;
  double timeout_seconds = 60;
  Output output = Output::kTable;
};

const common::FlagSet& GlobalFlagSet();

// Usage errors name the flag: --timeout not a positive number, -o neither
// json nor table, or -o table with --json.
absl::StatusOr<GlobalFlags> GlobalFlagsFrom(const common::ParsedFlags& flags);

// A client for --planner; a usage error when --planner is missing.
absl::StatusOr<std::unique_ptr<client::PlannerClient>> Connect(const GlobalFlags& global);

// `error` (UNAVAILABLE or DEADLINE_EXCEEDED from a call over several
// --planner replicas, where gRPC keeps only the last one's reason) with each
// replica's own reason, asked of each alone; other errors as they are.
absl::Status WithEveryReplicasError(const GlobalFlags& global, const absl::Status& error);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_GLOBAL_FLAGS_H_
