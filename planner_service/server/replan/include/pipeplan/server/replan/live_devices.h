// Who can run a stage: every plan the planner publishes for a running job
// (a replan of the policy, a `jobs replan` by hand) places stages only on
// devices with a live (ACTIVE) worker. A job no worker has joined yet plans
// onto its whole cluster.
//
// Thread safety: the functions are reentrant.
#ifndef PIPEPLAN_SERVER_REPLAN_LIVE_DEVICES_H_
#define PIPEPLAN_SERVER_REPLAN_LIVE_DEVICES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

struct LostDevices {
  // Devices of the cluster without a live worker (sorted): what a replan
  // leaves out.
  std::vector<std::string> devices;
  // Of those, devices whose workers are lost or left the job, and those
  // workers (of which `left` left): what a replan's reason names.
  std::vector<std::string> lost;
  std::vector<std::string> workers;
  std::vector<std::string> left;
};

// The devices of `cluster` that `job` has no live worker on; none when no
// worker has joined the job.
LostDevices FindLostDevices(const v1::Job& job, const v1::ClusterTopology& cluster);

// `request` with the `lost.devices` (and their links) removed from its
// cluster; FAILED_PRECONDITION naming the job when no device is left.
absl::StatusOr<v1::PlanRequest> OnLiveDevices(const v1::PlanRequest& request,
                                              const LostDevices& lost, const std::string& job_id);

// Caps the ranks, and the replicas the devices left cannot hold, at the
// cluster `in` was read from: a request made for the whole cluster asks for
// more ranks than a shrunk one has.
void FitToDevices(PlanInputs& in);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_LIVE_DEVICES_H_
