#include "pipeplan/server/replan/live_devices.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pipeplan::server {

LostDevices FindLostDevices(const v1::Job& job, const v1::ClusterTopology& cluster) {
  LostDevices out;
  if (job.workers().empty()) return out;
  std::set<std::string> live;
  std::map<std::string, std::vector<std::string>> lost_by_device;
  for (const v1::WorkerStatus& w : job.workers()) {
    if (w.state() == v1::WORKER_ACTIVE) live.insert(w.info().device_id());
  }
  for (const v1::WorkerStatus& w : job.workers()) {
    const bool gone = w.state() == v1::WORKER_LOST || w.state() == v1::WORKER_LEFT;
    if (gone && !live.contains(w.info().device_id())) {
      lost_by_device[w.info().device_id()].push_back(w.info().worker_id());
      if (w.state() == v1::WORKER_LEFT) out.left.push_back(w.info().worker_id());
    }
  }
  std::set<std::string> excluded;
  for (const v1::Device& d : cluster.devices()) {
    if (!live.contains(d.id())) excluded.insert(d.id());
  }
  out.devices.assign(excluded.begin(), excluded.end());
  for (const auto& [device, workers] : lost_by_device) {
    out.lost.push_back(device);
    out.workers.insert(out.workers.end(), workers.begin(), workers.end());
  }
  return out;
}

absl::StatusOr<v1::PlanRequest> OnLiveDevices(const v1::PlanRequest& request,
                                              const LostDevices& lost, const std::string& job_id) {
  const std::set<std::string> gone(lost.devices.begin(), lost.devices.end());
  v1::PlanRequest out = request;
  v1::ClusterTopology* c = out.mutable_cluster();
  c->clear_devices();
  for (const v1::Device& d : request.cluster().devices()) {
    if (!gone.contains(d.id())) *c->add_devices() = d;
  }
  if (c->devices().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no device of job ", job_id, " has a live worker (left out: ",
                     absl::StrJoin(lost.devices, ", "), "); start a worker and replan again"));
  }
  c->clear_links();
  for (const v1::Link& l : request.cluster().links()) {
    if (!gone.contains(l.src()) && !gone.contains(l.dst())) *c->add_links() = l;
  }
  return out;
}

void FitToDevices(PlanInputs& in) {
  in.options.num_ranks = std::min(in.options.num_ranks, in.cluster->num_devices());
  if (in.options.num_replicas > 0) {
    in.options.num_replicas =
        std::max(1, std::min(in.options.num_replicas,
                             in.cluster->num_devices() / std::max(1, in.options.num_ranks)));
  }
}

}  // namespace pipeplan::server
