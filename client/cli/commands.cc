#include "command.h"

namespace pipeplan::cli {

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
