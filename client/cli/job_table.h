// Human-readable rendering of jobs for `pipeplan jobs`: the job list, one
// job with its workers and plan, and its plan versions. Works on the wire
// messages, like plan_table.h.
#ifndef PIPEPLAN_CLIENT_CLI_JOB_TABLE_H_
#define PIPEPLAN_CLIENT_CLI_JOB_TABLE_H_

#include <string>
#include <vector>

#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::cli {

std::string FormatJobList(const v1::ListJobsResponse& jobs);
// The job, its training spec, workers and current plan.
std::string FormatJob(const v1::Job& job);
// One row per version: ranks, schedule, microbatches, the planned step, the
// step predicted before the version ran (under the previous version's
// calibration, with p50 and p90 under the measured spread), the measured
// step (recorded by the next version, or `job`'s observation for the
// current one), the error, the predicted and measured gain of the switch
// into it, and the reason.
std::string FormatVersions(const std::vector<v1::VersionedPlan>& versions, const v1::Job& job);
// The same rows as a JSON array (no graphs or stage lists).
std::string VersionsJson(const std::vector<v1::VersionedPlan>& versions, const v1::Job& job);
// "pending", "running", "completed", "failed", "cancelled".
std::string JobStateName(v1::JobState state);
// The state with its message: "running", "failed: REASON", "cancelled:
// REASON" (the planner's message already starts with "cancelled").
std::string JobStateText(const v1::Job& job);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_JOB_TABLE_H_
