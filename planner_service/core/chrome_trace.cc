#include "pipeplan/core/chrome_trace.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/core/json_string.h"

namespace pipeplan {
namespace {

void AppendMetadata(std::string* out, int pid, int tid, std::string_view what,
                    std::string_view name) {
  absl::StrAppend(out, out->empty() ? "" : ",\n", "{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                  ",\"name\":\"", std::string(what), "\",\"args\":{\"name\":", JsonString(name),
                  "}}");
}

char GanttLetter(schedule::ActionType type) {
  switch (type) {
    case schedule::ActionType::kForward:
      return 'F';
    case schedule::ActionType::kBackwardInput:
      return 'I';
    case schedule::ActionType::kBackwardWeight:
      return 'W';
    case schedule::ActionType::kFullBackward:
      return 'B';
    case schedule::ActionType::kOverlapFB:
      return 'O';
    default:
      return '.';
  }
}

// Ranks per replica (at least `num_ranks`, more when a span names a higher
// rank) and replicas (1 unless a measured span names another).
struct Lanes {
  int ranks = 0;
  int replicas = 1;
};

Lanes LanesOf(std::span<const TraceSpan> spans, int num_ranks) {
  Lanes out{.ranks = num_ranks};
  for (const TraceSpan& s : spans) {
    out.ranks = std::max(out.ranks, s.rank + 1);
    out.replicas = std::max(out.replicas, s.replica + 1);
  }
  return out;
}

}  // namespace

std::string FormatChromeTrace(std::span<const TraceSpan> spans, int num_ranks,
                              std::string_view title) {
  std::string events;
  const Lanes lanes = LanesOf(spans, num_ranks);
  for (int q = 0; q < lanes.replicas; ++q) {
    for (int r = 0; r < lanes.ranks; ++r) {
      const int pid = q * lanes.ranks + r;
      AppendMetadata(
          &events, pid, 0, "process_name",
          lanes.replicas > 1 ? absl::StrCat("replica ", q, " rank ", r) : absl::StrCat("rank ", r));
      AppendMetadata(&events, pid, 0, "thread_name", "compute");
      AppendMetadata(&events, pid, 1, "thread_name", "comm");
    }
  }
  for (const TraceSpan& s : spans) {
    const bool compute = schedule::IsCompute(s.action.type);
    absl::StrAppendFormat(
        &events,
        ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":%s,\"cat\":\"%s\",\"ts\":%.3f,"
        "\"dur\":%.3f,\"args\":{\"stage\":%d,\"microbatch\":%d}}",
        SpanLane(s, lanes.ranks), compute ? 0 : 1, JsonString(SpanName(s.action)),
        std::string(schedule::ActionTypeName(s.action.type)), s.start * 1e6,
        std::max(0.0, s.end - s.start) * 1e6, static_cast<int>(s.action.stage),
        s.action.microbatch);
  }
  return absl::StrCat("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"pipeplan_title\":",
                      JsonString(title), "},\n\"traceEvents\":[\n", events, "\n]}\n");
}

std::string FormatGantt(std::span<const TraceSpan> spans, int num_ranks, int width) {
  width = std::max(width, 10);
  double t0 = 0, t1 = 0;
  bool any = false;
  for (const TraceSpan& s : spans) {
    if (!schedule::IsCompute(s.action.type)) continue;
    t0 = any ? std::min(t0, s.start) : s.start;
    t1 = any ? std::max(t1, s.end) : s.end;
    any = true;
  }
  const double span = t1 > t0 ? t1 - t0 : 1;
  int replicas = 1;
  for (const TraceSpan& s : spans) replicas = std::max(replicas, s.replica + 1);
  num_ranks = std::max(0, num_ranks);
  std::vector<std::string> rows(replicas * num_ranks, std::string(width, '.'));
  for (const TraceSpan& s : spans) {
    if (!schedule::IsCompute(s.action.type) || s.rank < 0 || s.rank >= num_ranks) continue;
    const int a = static_cast<int>(std::floor((s.start - t0) / span * width));
    const int b = static_cast<int>(std::ceil((s.end - t0) / span * width));
    for (int c = std::max(0, a); c < std::min(width, std::max(b, a + 1)); ++c) {
      rows[SpanLane(s, num_ranks)][c] = GanttLetter(s.action.type);
    }
  }
  std::string out;
  for (int lane = 0; lane < static_cast<int>(rows.size()); ++lane) {
    const std::string name =
        replicas > 1 ? absl::StrFormat("q%d ", lane / num_ranks) : std::string();
    absl::StrAppendFormat(&out, "%srank %2d |%s|\n", name, lane % num_ranks, rows[lane]);
  }
  absl::StrAppendFormat(&out, "        0%*s\n", width, absl::StrFormat("%.4g s", span));
  return out;
}

}  // namespace pipeplan
