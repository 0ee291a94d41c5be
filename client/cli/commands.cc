#include <utility>

#include "command.h"

namespace pipeplan::cli {

Command MakeCommand(std::string words, std::string summary, std::string details, CommandRun run) {
  Command c;
  c.words = std::move(words);
  c.summary = std::move(summary);
  c.details = std::move(details);
  c.run = std::move(run);
  return c;
}

Command JobCommand(std::string words, std::string summary, std::string details, CommandRun run) {
  Command c = MakeCommand(std::move(words), std::move(summary), std::move(details), std::move(run));
  c.arguments = "JOB";
  c.num_arguments = 1;
  return c;
}

const std::vector<Command>& AllCommands() {
  static const std::vector<Command>* commands = [] {
    auto* all = new std::vector<Command>{PlanCommand(), SimulateCommand()};
    for (Command& c : JobLifecycleCommands()) all->push_back(std::move(c));
    for (Command& c : JobHistoryCommands()) all->push_back(std::move(c));
    all->push_back(JobsTraceCommand());
    all->push_back(JobsWatchCommand());
    return all;
  }();
  return *commands;
}

}  // namespace pipeplan::cli
