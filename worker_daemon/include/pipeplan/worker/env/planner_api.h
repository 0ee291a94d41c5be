// The planner as the worker's control plane sees it: the calls it makes
// (register, heartbeat, watch, fetch plans and the job, report steps, finish,
// rendezvous keys), and nothing else. The daemon talks through
// PlannerOverClient (the gRPC client); tests pass a fake planner
// (tests/unit/worker/fake_planner.h), so the step loop, the report sender and
// the control threads run without a socket.
//
// Every call returns the planner's status code (planner_service.proto says
// which: UNAVAILABLE retryable, NOT_FOUND job gone, FAILED_PRECONDITION the
// planner does not know the worker or the version). Implementations are
// thread-safe: the step loop, the report sender and the watch and heartbeat
// threads call concurrently.
#ifndef PIPEPLAN_WORKER_ENV_PLANNER_API_H_
#define PIPEPLAN_WORKER_ENV_PLANNER_API_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::worker {

class PlannerApi {
 public:
  virtual ~PlannerApi() = default;

  virtual absl::StatusOr<v1::Assignment> RegisterWorker(const std::string& job_id,
                                                        const v1::WorkerInfo& worker) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& job_id,
                                                          const std::string& worker_id) = 0;
  // A heartbeat that reports a failed transport (HeartbeatRequest's
  // failed_version and unreachable_devices).
  virtual absl::StatusOr<v1::HeartbeatResponse> ReportPeerFailure(
      const v1::HeartbeatRequest& request) = 0;
  // The stream of new plan versions; never null. Its Finish says why it
  // ended (NOT_FOUND: the job is gone).
  virtual std::unique_ptr<client::PlanWatch> WatchPlan(const v1::WatchPlanRequest& request) = 0;
  // `version` 0: the current one.
  virtual absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) = 0;
  // The version's contingencies only (PLAN_VIEW_CONTINGENCIES), the plans
  // left out while `known_generation` is current.
  virtual absl::StatusOr<v1::VersionedPlan> GetContingencies(const std::string& job_id,
                                                             int64_t version,
                                                             int64_t known_generation) = 0;
  virtual absl::StatusOr<v1::Job> GetJob(const std::string& job_id) = 0;
  virtual absl::StatusOr<v1::ReportStepResponse> ReportStep(
      const v1::ReportStepRequest& report) = 0;
  virtual absl::StatusOr<v1::Job> FinishWorker(const v1::FinishWorkerRequest& request) = 0;
  virtual absl::Status RendezvousSet(const std::string& job_id, const std::string& key,
                                     const std::string& value) = 0;
  // std::nullopt while the key is not set.
  virtual absl::StatusOr<std::optional<std::string>> RendezvousGet(const std::string& job_id,
                                                                   const std::string& key) = 0;
};

// The real planner behind `client`, which must outlive the adapter.
std::unique_ptr<PlannerApi> PlannerOverClient(client::PlannerClient& client);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_ENV_PLANNER_API_H_
