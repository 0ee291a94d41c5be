// Quoted string literals for text the project writes by hand: JSON (Chrome
// traces, the CLI's own JSON reports) and the planner's log values. Quotes,
// backslashes and control characters are escaped, everything else (UTF-8
// included) passed through. Pure; no I/O.
#ifndef PIPEPLAN_CORE_JSON_STRING_H_
#define PIPEPLAN_CORE_JSON_STRING_H_

#include <string>
#include <string_view>

namespace pipeplan {

// How a control byte other than \n, \r and \t is written.
enum class ControlEscape {
  kJson,  // \u00hh; DEL passes through, as JSON allows
  kHex,   // \xhh, DEL included, so that no byte reaches a terminal raw
};

// `s` appended to `out` in double quotes, escaped as above.
void AppendQuoted(std::string* out, std::string_view s, ControlEscape control);

// `s` quoted and escaped for JSON, e.g. a"b -> "a\"b".
std::string JsonString(std::string_view s);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_JSON_STRING_H_
