// A job's current plan version measured against predicted: what `jobs show`
// prints, what the planner's per-job metrics export and what the alert on
// prediction error watches.
//
// Measured, from the version's step reports after warm-up, over the steps
// every rank reported: the step's makespan (first rank's start to last
// rank's end, wall clock), the bubble ratio as the simulator counts it
// (1 - compute summed over ranks / (ranks x makespan)), and per rank the
// medians of step, compute and communication seconds and bubble ratio, and
// the largest peak memory.
// Predicted: the plan simulated as the workers run it (runtime_model.h)
// under the job's calibrated cluster: the plan's device factors updated by
// the reports', and links fitted from paired SEND/RECV timings over the
// plan's recorded fits, and each rank held for the host seconds per message
// its device was measured to spend posting SENDs and RECVs.
//
// Thread safety: reentrant; reads the registry (thread-safe).
#ifndef PIPEPLAN_SERVER_REPLAN_JOB_OBSERVER_H_
#define PIPEPLAN_SERVER_REPLAN_JOB_OBSERVER_H_

#include <string>

#include "absl/status/statusor.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/host_overhead.h"
#include "pipeplan/core/link_calibration.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/obs/metrics.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

struct ObserverOptions {
  int warmup_steps = 1;
  // Reports per device before its factor counts.
  int min_device_samples = 3;
  int report_window = 2'000;
  LinkFitOptions links;
  HostOverheadOptions host;
  GraphLimits limits;
};

// NOT_FOUND for an unknown job; FAILED_PRECONDITION when its current plan
// cannot be read. A version without complete steps yet has steps = 0 and the
// prediction only.
absl::StatusOr<v1::JobObservation> ObserveJob(const JobRegistry& registry,
                                              const std::string& job_id,
                                              const ObserverOptions& options = {});

// What the planner's per-job gauges export of an observation.
Metrics::JobFigures JobFiguresOf(const v1::JobObservation& observation);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_JOB_OBSERVER_H_
