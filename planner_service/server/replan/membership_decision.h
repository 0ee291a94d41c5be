// Whether a replan for a membership change (a worker lost, left or joined)
// publishes its plan. Membership is not calibration: a lost worker's version
// must go out whatever the predicted gain (with data-parallel replicas the
// current plan minus one replica scores about as fast as the new one, and a
// "predicted gain 0.0%" left the survivor waiting forever, issue 26), and a
// worker that comes back is used unless the new plan is measurably slower.
// Kept apart from the gain threshold of calibration replans
// (replan_policy.cc), which is a different policy. Private to the replan
// library.
#ifndef PIPEPLAN_SERVER_REPLAN_MEMBERSHIP_DECISION_H_
#define PIPEPLAN_SERVER_REPLAN_MEMBERSHIP_DECISION_H_

#include <optional>
#include <set>
#include <string>

#include "pipeplan/server/replan/replan_policy.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::server {

// Predicted relative loss (new plan slower than the current one) below
// which a rejoin is still taken: the calibrated model's noise. Reports
// around a failure or a restart (another process starting on the host)
// skewed it by several percent (a -3.0% "gain" kept a returning worker
// out), while a device measurably slower shows as tens of percent.
inline constexpr double kRejoinMaxPredictedLoss = 0.10;

// True for the triggers this file decides (not the calibration gain test).
bool IsMembershipTrigger(ReplanTrigger trigger);

// nullopt: publish `next`. Otherwise why not. A lost (or left) worker's
// replan always publishes. A join publishes when `next` gives a stage to one
// of the `joined` devices, unless a joined device was measured (`measured`,
// the current plan's calibration, has samples of it: it ran in an earlier
// version, e.g. before it was lost) and the predicted step is more than
// kRejoinMaxPredictedLoss slower than the current plan's.
// Without a measurement of the returning device the prediction rests only on
// the others' factors, which the first steps of a version and a process
// starting beside them skew (factors 250x apart were seen): it decides
// nothing about the returning worker.
std::optional<std::string> MembershipSkip(ReplanTrigger trigger, const ReplanOutcome& outcome,
                                          const v1::Plan& next, const std::set<std::string>& joined,
                                          const v1::PlanCalibration& measured);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_MEMBERSHIP_DECISION_H_
