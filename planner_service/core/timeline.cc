#include "pipeplan/core/timeline.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan {

std::string SpanName(const schedule::Action& action) {
  if (action.type == schedule::ActionType::kOverlapFB) {
    return absl::StrCat("F s", action.stage, " mb", action.microbatch, " + B s",
                        action.backward_stage, " mb", action.backward_microbatch);
  }
  return absl::StrCat(std::string(schedule::ActionTypeName(action.type)), " s", action.stage, " mb",
                      action.microbatch);
}

std::vector<TraceSpan> SpansOfSimulation(const schedule::SimulationResult& result) {
  std::vector<TraceSpan> out;
  out.reserve(result.timeline.size());
  for (const schedule::TimelineEvent& e : result.timeline) {
    out.push_back({e.rank, e.action, e.start, e.end});
  }
  std::stable_sort(out.begin(), out.end(), [](const TraceSpan& a, const TraceSpan& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.start < b.start;
  });
  return out;
}

absl::StatusOr<std::vector<TraceSpan>> SpansOfReports(std::span<const StepSample> step) {
  int64_t origin = INT64_MAX;
  std::set<std::pair<int, int>> workers;  // (replica, rank)
  for (const StepSample& r : step) {
    if (r.rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("report of worker ", r.worker_id, " step ", r.step, " has no rank"));
    }
    if (!workers.insert({r.replica, r.rank}).second) {
      return absl::InvalidArgumentError(absl::StrCat("two reports of replica ", r.replica, " rank ",
                                                     r.rank, " for step ", r.step));
    }
    origin = std::min(origin, r.start_unix_us);
  }
  std::vector<TraceSpan> out;
  for (const StepSample& r : step) {
    const double offset = static_cast<double>(r.start_unix_us - origin) * 1e-6;
    for (const TimingSample& t : r.timings) {
      PIPEPLAN_ASSIGN_OR_RETURN(std::optional<schedule::Action> a, schedule::ParseAction(t.action));
      if (!a) continue;
      TraceSpan span{r.rank, *a, offset + t.start_seconds, offset + t.start_seconds + t.seconds,
                     r.replica};
      if (!schedule::IsCompute(a->type) && t.post_unix_us > 0 && t.complete_unix_us > 0) {
        span.start = static_cast<double>(t.post_unix_us - origin) * 1e-6;
        span.end = static_cast<double>(t.complete_unix_us - origin) * 1e-6;
      }
      out.push_back(span);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const TraceSpan& a, const TraceSpan& b) {
    return std::tie(a.replica, a.rank, a.start) < std::tie(b.replica, b.rank, b.start);
  });
  return out;
}

}  // namespace pipeplan
