// A planner for the worker's control-plane tests: an in-process PlannerApi
// that serves the plan versions a test adds, answers ReportStep with the
// statuses a test scripts, keeps the rendezvous keys in a map, and records
// every call, so a test asserts what the worker asked and delivered.
// Thread-safe, as the real one.
#ifndef PIPEPLAN_TESTS_UNIT_WORKER_FAKE_PLANNER_H_
#define PIPEPLAN_TESTS_UNIT_WORKER_FAKE_PLANNER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/worker/env/planner_api.h"

namespace pipeplan::worker::testing {

class FakePlanner final : public PlannerApi {
 public:
  // GetPlan(job, version) answers `plan` from now on.
  void AddPlan(int64_t version, v1::VersionedPlan plan) ABSL_LOCKS_EXCLUDED(mu_);
  // The next ReportStep calls answer these statuses, in order, before
  // accepting (an accepted report is recorded and answered OK).
  void FailNextReports(std::vector<absl::Status> answers) ABSL_LOCKS_EXCLUDED(mu_);
  // Heartbeat answers this from now on (default: OK, version 0).
  void SetHeartbeat(absl::StatusOr<v1::HeartbeatResponse> answer) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks (real time, up to `limit`) until `done` holds for the accepted
  // reports; false when it never did.
  bool AwaitReports(const std::function<bool(const std::vector<v1::ReportStepRequest>&)>& done,
                    absl::Duration limit = absl::Seconds(30)) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<v1::ReportStepRequest> reports() const ABSL_LOCKS_EXCLUDED(mu_);
  // Every ReportStep call, accepted or not.
  int report_calls() const ABSL_LOCKS_EXCLUDED(mu_);
  int heartbeat_calls() const ABSL_LOCKS_EXCLUDED(mu_);
  int register_calls() const ABSL_LOCKS_EXCLUDED(mu_);
  // Every ReportPeerFailure request, in call order.
  std::vector<v1::HeartbeatRequest> failure_reports() const ABSL_LOCKS_EXCLUDED(mu_);
  // The versions GetPlan was asked for, in call order.
  std::vector<int64_t> fetched_versions() const ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<v1::Assignment> RegisterWorker(const std::string& job_id,
                                                const v1::WorkerInfo& worker) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& job_id,
                                                  const std::string& worker_id) override;
  absl::StatusOr<v1::HeartbeatResponse> ReportPeerFailure(
      const v1::HeartbeatRequest& request) override;
  std::unique_ptr<client::PlanWatch> WatchPlan(const v1::WatchPlanRequest& request) override;
  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) override;
  // The added plan's contingencies, as the planner's view answers them.
  absl::StatusOr<v1::VersionedPlan> GetContingencies(const std::string& job_id, int64_t version,
                                                     int64_t known_generation) override;
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id) override;
  absl::StatusOr<v1::ReportStepResponse> ReportStep(const v1::ReportStepRequest& report) override;
  absl::StatusOr<v1::Job> FinishWorker(const v1::FinishWorkerRequest& request) override;
  absl::Status RendezvousSet(const std::string& job_id, const std::string& key,
                             const std::string& value) override;
  absl::StatusOr<std::optional<std::string>> RendezvousGet(const std::string& job_id,
                                                           const std::string& key) override;

 private:
  mutable absl::Mutex mu_;
  std::map<int64_t, v1::VersionedPlan> plans_ ABSL_GUARDED_BY(mu_);
  std::deque<absl::Status> report_failures_ ABSL_GUARDED_BY(mu_);
  absl::StatusOr<v1::HeartbeatResponse> heartbeat_ ABSL_GUARDED_BY(mu_) = v1::HeartbeatResponse();
  std::vector<v1::ReportStepRequest> reports_ ABSL_GUARDED_BY(mu_);
  int report_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int heartbeat_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int register_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> fetched_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::HeartbeatRequest> failure_reports_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> keys_ ABSL_GUARDED_BY(mu_);
};

// A plan of `devices.size()` stages, one per device in order (1F1B,
// `microbatches` microbatches, 1 ms per forward), as version `version`.
v1::VersionedPlan PipelineOn(const std::vector<std::string>& devices, int microbatches,
                             int64_t version);

}  // namespace pipeplan::worker::testing

#endif  // PIPEPLAN_TESTS_UNIT_WORKER_FAKE_PLANNER_H_
