// ReportStep for one finished step: per-action timings in PyTorch notation,
// step time and peak memory (ReportSender delivers it). Built by the step
// loop (libpipeplan_worker).
#ifndef PIPEPLAN_WORKER_SRC_STEP_REPORT_H_
#define PIPEPLAN_WORKER_SRC_STEP_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "pipeplan/v1/planner_service.pb.h"
#include "pipeplan/worker/env/worker_options.h"
#include "pipeplan/worker/runtime/runtime.h"

namespace pipeplan::worker {

// The rank's idle share of the step: 1 - compute / step, in [0, 1].
double BubbleRatio(const StepResult& result);

v1::ReportStepRequest MakeStepReport(const WorkerOptions& options, int64_t version,
                                     const StepResult& result, double peak_memory_bytes,
                                     std::optional<double> loss = std::nullopt);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_STEP_REPORT_H_
