// Contingency plans (issue 26, docs/elastic.md "Precompiled shrink plans"):
// while a plan version runs, the replan policy plans ahead what it would
// publish if one of the version's devices, or all of one host's, were lost,
// and hands those plans to the workers (VersionedPlan.contingencies), which
// compile their stages in the background. On a real loss the policy
// publishes the contingency for exactly the devices lost when it still fits
// the calibration of that moment, so the survivors' stage compile is a
// cache hit instead of seconds of torch compilation.
//
// These are the pure parts: which losses to plan for, finding the plan of a
// loss, and when a contingency still stands. ReplanPolicy computes and uses
// them (replan_policy.h).
//
// Thread safety: the functions are reentrant.
#ifndef PIPEPLAN_SERVER_REPLAN_CONTINGENCY_PLANS_H_
#define PIPEPLAN_SERVER_REPLAN_CONTINGENCY_PLANS_H_

#include <string>
#include <vector>

#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

// The device sets a version's contingencies are planned for: each device
// with a rank in `plan` (any replica), then each host with ranks on several
// devices (all of them), each joined with `already_lost` (the devices the
// version already left out); each sorted, no set twice, at most
// `max_plans`, in that order. A set that would leave no device is skipped.
std::vector<std::vector<std::string>> ContingencyLossSets(
    const DecodedPlan& plan, const v1::ClusterTopology& cluster,
    const std::vector<std::string>& already_lost, int max_plans);

// `vp`'s contingency for exactly the sorted device set `lost`; null when it
// has none.
const v1::ContingencyPlan* FindContingency(const v1::VersionedPlan& vp,
                                           const std::vector<std::string>& lost);

// Whether a contingency whose step under the calibration at the loss is
// `contingency_step` seconds still stands against a plan solved then,
// `fresh_step`: at most `slack` (relative) slower. A contingency that cannot
// be scored (infinite, NaN) never stands.
bool ContingencyStillFits(double contingency_step, double fresh_step, double slack);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_CONTINGENCY_PLANS_H_
