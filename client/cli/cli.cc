#include "cli.h"

#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "command.h"
#include "global_flags.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/flag_set.h"
#include "pipeplan/common/version.h"

namespace pipeplan::cli {
namespace {

constexpr char kExitCodes[] =
    "exit codes: 0 ok, 1 error, 2 usage (a bad flag or argument), 3 planner unavailable\n"
    "(retry), 4 not found (the job, plan version or file named)\n";

bool IsFlag(const std::string& arg) { return arg.size() >= 2 && arg[0] == '-'; }

// The group of a two-word command ("jobs" of "jobs create"); empty for others.
std::string GroupOf(const std::string& words) {
  const size_t space = words.find(' ');
  return space == std::string::npos ? "" : words.substr(0, space);
}

bool IsGroup(const std::string& word) {
  if (word.empty()) return false;
  for (const Command& c : AllCommands()) {
    if (GroupOf(c.words) == word) return true;
  }
  return false;
}

const Command* FindCommand(const std::string& words) {
  for (const Command& c : AllCommands()) {
    if (c.words == words) return &c;
  }
  return nullptr;
}

common::FlagSet FullFlags(const Command& c) {
  common::FlagSet flags = c.flags;
  flags.Include(GlobalFlagSet());
  return flags;
}

// The command list of `pipeplan --help` (group empty) or `pipeplan jobs --help`.
std::string CommandList(const std::string& group) {
  std::string out = "commands:\n";
  for (const Command& c : AllCommands()) {
    if (!group.empty() && GroupOf(c.words) != group) continue;
    const std::string left = absl::StrCat(c.words, c.arguments.empty() ? "" : " ", c.arguments);
    absl::StrAppendFormat(&out, "  %-22s %s\n", left, c.summary);
  }
  return out;
}

std::string TopHelp() {
  return absl::StrCat(
      "usage: pipeplan [global flags] <command> [flags]\n\n"
      "Plans pipeline-parallel training: splits a model graph into stages, picks a\n"
      "schedule, and manages the planner's jobs.\n\n",
      CommandList(""), "\nRun `pipeplan <command> --help` for a command's flags.\n\n",
      GlobalFlagSet().Help(), "\n", kExitCodes);
}

std::string GroupHelp(const std::string& group) {
  return absl::StrCat("usage: pipeplan [global flags] ", group, " <subcommand> [flags]\n\n",
                      CommandList(group), "\nRun `pipeplan ", group,
                      " <subcommand> --help` for its flags.\n");
}

std::string CommandHelp(const Command& c) {
  std::string out =
      absl::StrCat("usage: pipeplan [global flags] ", c.words, c.arguments.empty() ? "" : " ",
                   c.arguments, " [flags]\n\n", c.summary, "\n");
  if (!c.details.empty()) absl::StrAppend(&out, "\n", c.details);
  absl::StrAppend(&out, "\n", FullFlags(c).Help(), "\n", kExitCodes);
  return out;
}

// "unknown command", with the closest command or group when one is close.
std::string UnknownCommand(const std::string& words) {
  std::vector<std::string> names;
  for (const Command& c : AllCommands()) {
    names.push_back(c.words);
    if (!GroupOf(c.words).empty()) names.push_back(GroupOf(c.words));
  }
  const std::string best = common::ClosestName(words, names);
  return absl::StrCat("unknown command \"", words, "\"",
                      best.empty() ? "" : absl::StrCat("; did you mean \"", best, "\"?"));
}

// `command`: the words whose --help the message points to ("" for pipeplan's).
int Usage(absl::string_view message, absl::string_view command) {
  return common::UsageFailure("pipeplan", message, command);
}

// `pipeplan help [command words]`.
int RunHelp(const std::vector<std::string>& words) {
  const std::string joined = absl::StrJoin(words, " ");
  if (joined.empty()) {
    std::cout << TopHelp();
  } else if (const Command* c = FindCommand(joined)) {
    std::cout << CommandHelp(*c);
  } else if (IsGroup(joined)) {
    std::cout << GroupHelp(joined);
  } else {
    return Usage(UnknownCommand(joined), "");
  }
  return common::kExitOk;
}

int RunCommand(const Command& c, std::vector<std::string> args) {
  absl::StatusOr<common::ParsedFlags> flags = FullFlags(c).Parse(args);
  if (!flags.ok()) return Usage(flags.status().message(), c.words);
  if (flags->help_requested()) {
    std::cout << CommandHelp(c);
    return common::kExitOk;
  }
  // A command's own --version (`jobs show JOB --version V`: a plan version)
  // hides the global switch; before the command it is the program's
  // (RunCli).
  if (flags->Has("version") && !c.flags.Declares("version")) {
    std::cout << common::VersionLine("pipeplan");
    return common::kExitOk;
  }
  const std::vector<std::string>& positionals = flags->positionals();
  if (static_cast<int>(positionals.size()) > c.num_arguments) {
    return Usage(absl::StrCat("unexpected argument \"", positionals[c.num_arguments], "\""),
                 c.words);
  }
  if (static_cast<int>(positionals.size()) < c.num_arguments) {
    return Usage(absl::StrCat(c.words, " wants ", c.arguments), c.words);
  }
  absl::StatusOr<GlobalFlags> global = GlobalFlagsFrom(*flags);
  if (!global.ok()) return Usage(global.status().message(), c.words);
  const absl::Status status =
      WithEveryReplicasError(*global, c.run(CommandContext{*flags, *global, positionals}));
  if (common::IsUsageError(status)) return Usage(status.message(), c.words);
  if (!status.ok()) {
    std::cerr << "pipeplan: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
              << "\n";
  }
  return common::ExitCodeFor(status);
}

}  // namespace

int RunCli(const std::vector<std::string>& args) {
  absl::StatusOr<common::ParsedFlags> global =
      GlobalFlagSet().Parse(args, common::FlagSet::Mode::kUntilPositional);
  if (!global.ok()) {
    return Usage(absl::StrCat(global.status().message(), " (command flags go after the command)"),
                 "");
  }
  if (global->help_requested()) return RunHelp({});
  if (global->Has("version")) {
    std::cout << common::VersionLine("pipeplan");
    return common::kExitOk;
  }
  size_t i = global->consumed();
  if (i == args.size()) {
    std::cerr << TopHelp();
    return common::kExitUsage;
  }
  std::string words = args[i++];
  if (words == "help") return RunHelp({args.begin() + i, args.end()});
  if (IsGroup(words)) {
    if (i == args.size() || IsFlag(args[i])) {
      const bool help = i < args.size() && (args[i] == "--help" || args[i] == "-h");
      (help ? std::cout : std::cerr) << GroupHelp(words);
      return help ? common::kExitOk : common::kExitUsage;
    }
    words += " " + args[i++];
  }
  const Command* command = FindCommand(words);
  if (command == nullptr) {
    return Usage(UnknownCommand(words), IsGroup(GroupOf(words)) ? GroupOf(words) : "");
  }
  // Global flags given before the command are parsed again with the
  // command's, so both places work.
  std::vector<std::string> rest(args.begin(), args.begin() + global->consumed());
  rest.insert(rest.end(), args.begin() + i, args.end());
  return RunCommand(*command, std::move(rest));
}

}  // namespace pipeplan::cli
