// Sanity checks on a worker's step report before it is stored and folded
// into calibration: one report of 1e300 s, NaN or a negative time would
// otherwise skew every median it lands in, or the job's metrics.
//
// Rejected (INVALID_ARGUMENT naming the field, e.g. "timings[3].seconds"):
// a non-finite or negative step_seconds, peak_memory_bytes, compute or comm
// seconds, bubble_ratio outside [0, 1], or an action timing (seconds,
// start_seconds, bytes, wait_seconds) that is non-finite or negative; and an
// absurd time: above max(1e6 x the plan's predicted step, the worker
// lease). Either bound alone would be wrong: a prediction can be off by
// orders of magnitude before calibration, and a long step does not lose the
// lease (heartbeats run on their own thread); beyond both, it is garbage.
//
// Reentrant.
#ifndef PIPEPLAN_SERVER_RPC_REPORT_GUARD_H_
#define PIPEPLAN_SERVER_RPC_REPORT_GUARD_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

inline constexpr double kAbsurdPredictionMultiple = 1e6;

// OK, or INVALID_ARGUMENT; `*field` (when not null) gets the offending
// field's name for counting.
absl::Status CheckStepReport(const v1::ReportStepRequest& report, double predicted_step_seconds,
                             absl::Duration lease, std::string* field = nullptr);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_RPC_REPORT_GUARD_H_
