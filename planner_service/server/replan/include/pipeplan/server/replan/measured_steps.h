// The measured half of a job's observation (job_observer.h): from a plan
// version's step samples, the step's makespan and bubble ratio over the
// steps every rank reported, and one row per worker that ran a rank. With
// data-parallel replicas a rank has one worker per replica, each on its own
// device: each gets its own row, ordered by the replica the plan gives its
// device (`jobs show` reads the replica back from the plan).
//
// Thread safety: a pure function.
#ifndef PIPEPLAN_SERVER_REPLAN_MEASURED_STEPS_H_
#define PIPEPLAN_SERVER_REPLAN_MEASURED_STEPS_H_

#include <vector>

#include "pipeplan/core/calibration.h"
#include "pipeplan/v1/plan.pb.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

// Sets out's steps, measured step and bubble, and ranks (by rank, then
// replica). `plan` is the version the samples ran; a device it lists in no
// replica sorts as replica 0.
void AddMeasuredSteps(const std::vector<StepSample>& samples, const v1::Plan& plan, int num_ranks,
                      v1::JobObservation* out);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_MEASURED_STEPS_H_
