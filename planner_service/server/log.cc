#include "pipeplan/server/log.h"

#include <atomic>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pipeplan::server {
namespace {
std::atomic<bool> g_enabled{true};
// Serializes whole lines on stderr (it guards the stream, not data).
ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);

void AppendValue(std::string* out, std::string_view v) {
  const bool quote = v.empty() || v.find_first_of(" \t\"=\n") != std::string_view::npos;
  if (!quote) {
    out->append(v);
    return;
  }
  out->push_back('"');
  out->append(absl::StrReplaceAll(std::string(v), {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}}));
  out->push_back('"');
}
}  // namespace

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
