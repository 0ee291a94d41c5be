#include "pipeplan/worker/env/planner_api.h"

namespace pipeplan::worker {
namespace {

// One line per call: the adapter adds nothing (retries and backoff are the
// callers' decisions, made by status code).
class ClientPlanner final : public PlannerApi {
 public:
  explicit ClientPlanner(client::PlannerClient& client) : client_(client) {}

  absl::StatusOr<v1::Assignment> RegisterWorker(const std::string& job_id,
                                                const v1::WorkerInfo& worker) override {
    return client_.RegisterWorker(job_id, worker);
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& job_id,
                                                  const std::string& worker_id) override {
    return client_.Heartbeat(job_id, worker_id);
  }
  absl::StatusOr<v1::HeartbeatResponse> ReportPeerFailure(
      const v1::HeartbeatRequest& request) override {
    return client_.Heartbeat(request);
  }
  std::unique_ptr<client::PlanWatch> WatchPlan(const v1::WatchPlanRequest& request) override {
    return client_.WatchPlan(request);
  }
  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) override {
    return client_.GetPlan(job_id, version);
  }
  absl::StatusOr<v1::VersionedPlan> GetContingencies(const std::string& job_id, int64_t version,
                                                     int64_t known_generation) override {
    return client_.GetContingencies(job_id, version, known_generation);
  }
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id) override {
    return client_.GetJob(job_id);
  }
  absl::StatusOr<v1::ReportStepResponse> ReportStep(const v1::ReportStepRequest& report) override {
    return client_.ReportStep(report);
  }
  absl::StatusOr<v1::Job> FinishWorker(const v1::FinishWorkerRequest& request) override {
    return client_.FinishWorker(request);
  }
  absl::Status RendezvousSet(const std::string& job_id, const std::string& key,
                             const std::string& value) override {
    return client_.RendezvousSet(job_id, key, value);
  }
  absl::StatusOr<std::optional<std::string>> RendezvousGet(const std::string& job_id,
                                                           const std::string& key) override {
    return client_.RendezvousGet(job_id, key);
  }

 private:
  client::PlannerClient& client_;
};

}  // namespace

std::unique_ptr<PlannerApi> PlannerOverClient(client::PlannerClient& client) {
  return std::make_unique<ClientPlanner>(client);
}

}  // namespace pipeplan::worker
