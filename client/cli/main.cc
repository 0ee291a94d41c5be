// `pipeplan`: plans pipeline-parallel training from the command line
// (docs/cli.md).
//
//   pipeplan plan --graph model.json --cluster cluster.json [--ranks P] ...
//   pipeplan --planner 127.0.0.1:7600 plan|jobs ...
//
// Offline (no --planner) the CLI runs the planning core in-process, the same
// library the planner service uses.
#include <string>
#include <vector>

#include "cli.h"

int main(int argc, char** argv) {
  return pipeplan::cli::RunCli(std::vector<std::string>(argv + 1, argv + argc));
}
