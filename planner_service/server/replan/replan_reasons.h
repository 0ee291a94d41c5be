// Why the replan policy published a version or skipped one, in words: the
// text of a version's `reason` (the lost, left or joined workers, or the
// device calibration found furthest from the model, then the predicted step
// before and after) and the factors a replan_skipped log line carries.
#ifndef PIPEPLAN_SERVER_REPLAN_REPLAN_REASONS_H_
#define PIPEPLAN_SERVER_REPLAN_REPLAN_REASONS_H_

#include <set>
#include <string>

#include "pipeplan/core/calibration.h"
#include "pipeplan/server/replan/live_devices.h"
#include "pipeplan/server/replan/replan_policy.h"

namespace pipeplan::server {

// "gpu0:1.000,gpu1:2.010": what a replan_skipped log line carries.
std::string FactorsText(const CalibrationResult& est);

// The published version's reason: why, then the predicted step before and
// after.
std::string VersionReason(ReplanTrigger trigger, const CalibrationResult& est,
                          const std::set<std::string>& joined, const LostDevices& lost,
                          const ReplanOutcome& outcome);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_REPLAN_REASONS_H_
