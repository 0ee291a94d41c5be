// The version every binary prints for --version: the CMake project() version
// and, when the source tree was a git checkout at configure time, its
// `git describe`.
#ifndef PIPEPLAN_COMMON_VERSION_H_
#define PIPEPLAN_COMMON_VERSION_H_

#include <string>

namespace pipeplan::common {

// "0.1.0".
const char* Version();
// `git describe --tags --always --dirty` at configure time; empty outside git.
const char* GitDescribe();
// "pipeplan-planner 0.1.0 (git v0.1.0-3-gabc1234)\n".
std::string VersionLine(const std::string& program);

}  // namespace pipeplan::common

#endif  // PIPEPLAN_COMMON_VERSION_H_
