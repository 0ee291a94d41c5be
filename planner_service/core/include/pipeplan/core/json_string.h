// A JSON string literal for text the project writes by hand (Chrome traces,
// the CLI's own JSON reports): quotes, backslashes and control characters
// escaped, everything else (UTF-8 included) passed through. Pure; no I/O.
#ifndef PIPEPLAN_CORE_JSON_STRING_H_
#define PIPEPLAN_CORE_JSON_STRING_H_

#include <string>
#include <string_view>

namespace pipeplan {

// `s` quoted and escaped, e.g. a"b -> "a\"b".
std::string JsonString(std::string_view s);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_JSON_STRING_H_
