// Small JSON writers for the CLI's own -o json reports (simulate, jobs
// reports, jobs versions), which are not protobuf messages.
#ifndef PIPEPLAN_CLIENT_CLI_JSON_TEXT_H_
#define PIPEPLAN_CLIENT_CLI_JSON_TEXT_H_

#include <string>
#include <string_view>
#include <vector>

#include "pipeplan/core/json_string.h"

namespace pipeplan::cli {

using ::pipeplan::JsonString;  // a quoted, escaped JSON string
// A number that reads back to the same double.
std::string JsonNumber(double x);

template <typename T, typename F>
std::string JsonArray(const std::vector<T>& values, F format) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += format(values[i]);
  }
  return out + "]";
}

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_JSON_TEXT_H_
