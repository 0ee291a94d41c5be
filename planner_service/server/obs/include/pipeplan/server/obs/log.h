// Structured logs: one line per event on stderr, key=value pairs, values
// quoted when they contain spaces, quotes, '=', backslashes or control bytes:
//   ts=2024-05-01T12:00:00.123Z level=info event=plan_published job=job-1a2b plan_version=2
// Values often come from clients (job names, worker ids, error text), so
// inside quotes every control byte is escaped (\n, \r, \t, \x1b): a value
// can neither start a new line nor send escape sequences to a terminal.
// Thread safety: lines from concurrent callers never interleave.
#ifndef PIPEPLAN_SERVER_OBS_LOG_H_
#define PIPEPLAN_SERVER_OBS_LOG_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pipeplan::server {

using LogFields = std::vector<std::pair<std::string_view, std::string>>;

void LogEvent(std::string_view level, std::string_view event, const LogFields& fields = {});
inline void LogInfo(std::string_view event, const LogFields& fields = {}) {
  LogEvent("info", event, fields);
}
inline void LogWarn(std::string_view event, const LogFields& fields = {}) {
  LogEvent("warn", event, fields);
}
// `value` as LogEvent writes it: bare, or quoted and escaped.
std::string LogValue(std::string_view value);
// Silences LogEvent (for unit tests that produce many events).
void SetLogEnabled(bool enabled);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_OBS_LOG_H_
