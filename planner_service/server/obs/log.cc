#include "pipeplan/server/obs/log.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pipeplan/core/json_string.h"

namespace pipeplan::server {
namespace {
std::atomic<bool> g_enabled{true};
// Serializes whole lines on stderr (it guards the stream, not data).
ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);

// Values are written so that no client-chosen string can forge a line or a
// field, nor reach a terminal as a control sequence: a value with a space,
// quote, '=', backslash or any control byte is quoted, and inside the quotes
// backslash, quote and control bytes are escaped (\n, \r, \t, \xHH).
bool NeedsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return true;
  }
  return false;
}

void AppendValue(std::string* out, std::string_view v) {
  if (!NeedsQuotes(v)) {
    out->append(v);
    return;
  }
  AppendQuoted(out, v, ControlEscape::kHex);
}
}  // namespace

std::string LogValue(std::string_view value) {
  std::string out;
  AppendValue(&out, value);
  return out;
}

void SetLogEnabled(bool enabled) { g_enabled.store(enabled); }

void LogEvent(std::string_view level, std::string_view event, const LogFields& fields) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  std::string line = absl::StrCat(
      "ts=", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()));
  line.append(" level=").append(level).append(" event=").append(event);
  for (const auto& [key, value] : fields) {
    line.append(" ").append(key).append("=");
    AppendValue(&line, value);
  }
  line.push_back('\n');
  absl::MutexLock l(&g_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace pipeplan::server
