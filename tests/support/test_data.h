// The bundled example files (tests/data) for tests: where they are and how to
// read one as a pipeplan.v1 message. CTest sets PIPEPLAN_TEST_DATA; run by
// hand from the repository root, the relative default works.
#ifndef PIPEPLAN_TESTS_SUPPORT_TEST_DATA_H_
#define PIPEPLAN_TESTS_SUPPORT_TEST_DATA_H_

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "pipeplan/convert/proto_convert.h"

namespace pipeplan::testing {

inline std::string DataPath(const std::string& name) {
  const char* dir = std::getenv("PIPEPLAN_TEST_DATA");
  return std::string(dir ? dir : "tests/data") + "/" + name;
}

// Aborts on a missing or malformed file: the bundled data is part of the test.
template <typename Message>
Message ReadJson(const std::string& name) {
  std::ifstream in(DataPath(name));
  std::stringstream ss;
  ss << in.rdbuf();
  Message m;
  if (!ParseJson(ss.str(), &m).ok()) std::abort();
  return m;
}

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_SUPPORT_TEST_DATA_H_
