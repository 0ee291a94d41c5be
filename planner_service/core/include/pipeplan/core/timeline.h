// One step of a pipeline as spans per rank: what the trace formats draw.
//
// Both the predicted timeline (the simulator's, SpansOfSimulation) and the
// measured one (workers' step reports, SpansOfReports) become the same
// spans, so a predicted and a measured trace open side by side and compare
// action by action. Each rank has two lanes: compute (F, I, W, B) and
// communication (SEND/RECV from posting to completion; several may be in
// flight at once). Times are seconds from the step's start on the earliest
// rank.
//
// Reentrant; no I/O.
#ifndef PIPEPLAN_CORE_TIMELINE_H_
#define PIPEPLAN_CORE_TIMELINE_H_

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/schedule/action.h"
#include "pipeplan/core/schedule/simulator.h"

namespace pipeplan {

struct TraceSpan {
  int rank = 0;
  schedule::Action action;
  double start = 0;  // seconds
  double end = 0;
  // The data-parallel replica of a measured span (reports carry it); 0 for
  // simulated spans, which are replica 0's.
  int replica = 0;
};

// Lane of a span in a picture of `num_ranks` ranks per replica: replica 0's
// ranks first, then replica 1's, ...
inline int SpanLane(const TraceSpan& s, int num_ranks) { return s.replica * num_ranks + s.rank; }

// "F s3 mb5", "SEND_B s1 mb0": the span's display name.
std::string SpanName(const schedule::Action& action);

// The simulator's timeline (SimulateOptions::record_timeline) as spans.
std::vector<TraceSpan> SpansOfSimulation(const schedule::SimulationResult& result);

// One step's reports (one per (replica, rank), with rank, start_unix_us and
// per-action start_seconds; SEND/RECV with post/complete times) as spans,
// ordered by replica, rank, then start. INVALID_ARGUMENT for an action that
// does not parse, a report without a rank, or two reports of one (replica,
// rank).
absl::StatusOr<std::vector<TraceSpan>> SpansOfReports(std::span<const StepSample> step);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_TIMELINE_H_
