// What a replan solves and scores with, shared by the replan policy's
// evaluation and its contingency plans (contingency_plans.h): the job's
// request under the calibrated model less the lost devices, a plan's step
// simulated as the workers run it, and the calibration a published plan
// records.
//
// Thread safety: the functions are reentrant.
#ifndef PIPEPLAN_SERVER_REPLAN_REPLAN_INPUTS_H_
#define PIPEPLAN_SERVER_REPLAN_REPLAN_INPUTS_H_

#include "absl/status/statusor.h"
#include "calibrated_model.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/cluster.h"
#include "pipeplan/server/replan/live_devices.h"
#include "pipeplan/server/replan/replan_policy.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::server {

// The job's request as MakePlan inputs under the calibrated cluster, ranks
// and replicas capped at the devices left, the solve time capped by the
// policy.
absl::StatusOr<PlanInputs> CalibratedInputs(const v1::PlanRequest& request,
                                            const CalibratedModel& model, const LostDevices& lost,
                                            const ReplanPolicyOptions& options);

// Step seconds of a plan under the calibrated model, simulated as the
// workers run it (transfers overlap compute), so the current and the new
// plan compare as they will be measured: infinite when it cannot run there
// (unreadable, or a stage on a device that is gone). Each device's measured
// host time per message (host_overhead.h) goes with it into either plan.
absl::StatusOr<double> ScoreUnder(const DecodedPlan& plan, bool readable, const PlanInputs& in,
                                  const CalibratedModel& model);

// The new plan's step simulated as run (ScoreUnder), or the solver's own
// figure when the plan cannot be read back or scored.
double AsRunStep(const v1::Plan& plan, double solver_step, const PlanInputs& in,
                 const CalibratedModel& model);

// `next` with the calibration it was planned under (Plan.calibration).
v1::Plan WithCalibration(v1::Plan next, const Cluster& cluster, const CalibratedModel& model,
                         const LostDevices& lost, const ReplanOutcome& outcome);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_REPLAN_INPUTS_H_
