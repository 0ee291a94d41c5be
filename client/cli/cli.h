// The `pipeplan` dispatcher: global flags, the command words, the command's
// flags, --help at every level (exit 0), --version, and the exit code of the
// result (pipeplan/common/exit_code.h). main.cc is a call to RunCli.
#ifndef PIPEPLAN_CLIENT_CLI_CLI_H_
#define PIPEPLAN_CLIENT_CLI_CLI_H_

#include <string>
#include <vector>

namespace pipeplan::cli {

// `args` without the program name. Writes to stdout/stderr; returns the
// process exit code.
int RunCli(const std::vector<std::string>& args);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_CLI_H_
