// One `pipeplan` command: the words that name it ("jobs replan"), its
// arguments, help text and flags, and the function that runs it. The
// dispatcher (cli.h) parses the command's flags together with the global
// ones, prints --help from these fields and maps the result to an exit code.
#ifndef PIPEPLAN_CLIENT_CLI_COMMAND_H_
#define PIPEPLAN_CLIENT_CLI_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "global_flags.h"
#include "pipeplan/common/flag_set.h"

namespace pipeplan::cli {

// What a command runs with.
struct CommandContext {
  const common::ParsedFlags& flags;  // the command's flags and the global ones
  const GlobalFlags& global;
  const std::vector<std::string>& args;  // positional arguments (count checked)
};

struct Command {
  std::string words;                  // "plan", "jobs replan"
  std::string arguments;              // synopsis of the positional arguments: "JOB"
  int num_arguments = 0;              // exactly this many
  std::string summary;                // one line for `pipeplan --help`
  std::string details;                // more for `pipeplan <command> --help` (may be empty)
  common::FlagSet flags{"pipeplan"};  // the command's own (globals are added)
  std::function<absl::Status(const CommandContext&)> run;
};

using CommandRun = std::function<absl::Status(const CommandContext&)>;

// A command without positional arguments; its flags are added by the caller.
Command MakeCommand(std::string words, std::string summary, std::string details, CommandRun run);
// A command on one job: `pipeplan <words> JOB` (ctx.args[0] is the job id).
Command JobCommand(std::string words, std::string summary, std::string details, CommandRun run);

// Every command, in the order `pipeplan --help` lists them.
const std::vector<Command>& AllCommands();

// The commands of each file, for AllCommands.
Command PlanCommand();
Command SimulateCommand();
std::vector<Command> JobLifecycleCommands();  // create, list, show, cancel, delete
std::vector<Command> JobHistoryCommands();    // reports, versions, replan
Command JobsTraceCommand();                   // jobs trace
Command JobsWatchCommand();                   // jobs watch

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_COMMAND_H_
