// ReportStep for one finished step: per-action timings in PyTorch notation,
// step time and peak memory, sent with a few retries. What the planner
// answers about plan versions goes into ControlState, so the next step
// boundary can switch. Internal to libpipeplan_worker.
#ifndef PIPEPLAN_WORKER_SRC_STEP_REPORT_H_
#define PIPEPLAN_WORKER_SRC_STEP_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "control_state.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "pipeplan/worker/runtime.h"
#include "pipeplan/worker/worker_options.h"

namespace pipeplan::worker {

// The rank's idle share of the step: 1 - compute / step, in [0, 1].
double BubbleRatio(const StepResult& result);

v1::ReportStepRequest MakeStepReport(const WorkerOptions& options, int64_t version,
                                     const StepResult& result, double peak_memory_bytes,
                                     std::optional<double> loss = std::nullopt);

// Sends `report`: retried (3 tries) while the planner is unavailable. A
// FAILED_PRECONDITION (a stale version, or the job lost this worker) asks
// Heartbeat for the current version instead; the heartbeat thread registers
// again when the worker was lost. Returns "ok" or the code name of the last failure (the
// `report=` of the step event).
std::string SendStepReport(client::PlannerClient& planner, const WorkerOptions& options,
                           ControlState& state, const v1::ReportStepRequest& report);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_STEP_REPORT_H_
