// Human-readable rendering of a Plan: one row per stage, then the schedule,
// the predicted step and the solver report. Works on the wire message so the
// offline CLI and a remote planner print the same thing.
#ifndef PIPEPLAN_CLIENT_CLI_PLAN_TABLE_H_
#define PIPEPLAN_CLIENT_CLI_PLAN_TABLE_H_

#include <string>

#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::cli {

std::string FormatPlanTable(const v1::Plan& plan);
// The schedule as users spell it (GPipe, 1F1B, ZBVZeroBubble; "auto").
std::string ScheduleDisplayName(v1::Schedule schedule);
// Pipeline ranks of a plan: the devices its stages run on.
int PlanRanks(const v1::Plan& plan);
// Data-parallel replicas of a plan (1 when it lists none).
int PlanReplicas(const v1::Plan& plan);
// `plan --explain`: the best plan of every (ranks, replicas) the planner
// scored, in the planner's order (best first by the search's objective),
// with that objective: the step time when the request fixed a global batch
// of a graph with a batch size (`global_batch` > 0), else the step time per
// microbatch and replica. Pass 0 when the batch is not fixed.
std::string FormatShapeTable(const v1::Plan& plan, int global_batch);
std::string HumanBytes(double bytes);
std::string HumanSeconds(double seconds);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_PLAN_TABLE_H_
