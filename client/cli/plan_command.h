// `pipeplan plan`: plans in-process with the planning core, or on the
// planner given by --planner. PlanOffline is the in-process path, shared
// with `simulate --graph`.
#ifndef PIPEPLAN_CLIENT_CLI_PLAN_COMMAND_H_
#define PIPEPLAN_CLIENT_CLI_PLAN_COMMAND_H_

#include "absl/status/statusor.h"
#include "global_flags.h"
#include "pipeplan/v1/plan.pb.h"

namespace pipeplan::cli {

absl::StatusOr<v1::Plan> PlanOffline(const v1::PlanRequest& request);

// PlanOffline without --planner, the planner's Plan RPC with it.
absl::StatusOr<v1::Plan> PlanAnywhere(const GlobalFlags& global, const v1::PlanRequest& request);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_PLAN_COMMAND_H_
