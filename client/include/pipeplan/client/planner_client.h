// libpipeplan_client: a small C++ API over the planner's gRPC stub for
// training jobs, schedulers and worker daemons.
//
//   PIPEPLAN_ASSIGN_OR_RETURN(auto client, PlannerClient::Connect({.address = "127.0.0.1:7600"}));
//   PIPEPLAN_ASSIGN_OR_RETURN(v1::Plan plan, client->Plan(request));
//
// Every call returns absl::Status(Or) with the server's code and message
// (INVALID_ARGUMENT naming the field, NOT_FOUND, ...); transport failures are
// UNAVAILABLE, a call over its timeout DEADLINE_EXCEEDED.
// Thread safety: a PlannerClient may be shared by any number of threads.
#ifndef PIPEPLAN_CLIENT_PLANNER_CLIENT_H_
#define PIPEPLAN_CLIENT_PLANNER_CLIENT_H_

#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/v1/planner_service.grpc.pb.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace pipeplan::client {

struct ClientOptions {
  // HOST:PORT, or several replicas' comma-separated (A,B,C): the client keeps
  // to the first that answers and moves to the next when it dies (hosts are
  // resolved once, at Connect).
  std::string address = "127.0.0.1:7600";
  // TLS when tls_ca_file is set (PEM CA that signed the server's
  // certificate); mutual TLS when tls_cert_file and tls_key_file are set too.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Sent as "authorization: Bearer <token>" when non-empty. token_file's
  // first line is used when token is empty.
  std::string token;
  std::string token_file;
  // Per-call timeout for calls that take no explicit one.
  absl::Duration timeout = absl::Seconds(60);
  int max_message_bytes = 64 << 20;
};

// A server stream of plan versions (WatchPlan).
class PlanWatch {
 public:
  virtual ~PlanWatch() = default;
  // Blocks for the next version; false when the stream ended (see Finish).
  virtual bool Next(v1::PlanUpdate* update) = 0;
  // Ends the stream from any thread; Next then returns false.
  virtual void Cancel() = 0;
  // The stream's final status; call after Next returned false.
  virtual absl::Status Finish() = 0;
};

class PlannerClient {
 public:
  // Errors: INVALID_ARGUMENT for unreadable TLS or token files. Does not wait
  // for the server (the first call does).
  static absl::StatusOr<std::unique_ptr<PlannerClient>> Connect(const ClientOptions& options);
  PlannerClient(const PlannerClient&) = delete;
  PlannerClient& operator=(const PlannerClient&) = delete;

  absl::StatusOr<v1::Plan> Plan(const v1::PlanRequest& request);
  absl::StatusOr<v1::Plan> Plan(const v1::PlanRequest& request, absl::Duration timeout);

  absl::StatusOr<v1::Job> CreateJob(const std::string& name, const v1::PlanRequest& request,
                                    const v1::TrainingSpec& training = v1::TrainingSpec());
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<v1::ListJobsResponse> ListJobs();
  absl::Status DeleteJob(const std::string& job_id);
  // Stops a running job, keeping its plans and reports (JOB_CANCELLED); its
  // workers stop. FAILED_PRECONDITION when it already succeeded or failed.
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const std::string& reason = "");
  // version 0: current.
  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version = 0);
  // GetPlan's PLAN_VIEW_CONTINGENCIES: the version's contingency plans and
  // their generation, without the plans while `known_generation` is current.
  absl::StatusOr<v1::VersionedPlan> GetContingencies(const std::string& job_id, int64_t version,
                                                     int64_t known_generation);
  absl::StatusOr<v1::VersionedPlan> ReplanJob(const v1::ReplanJobRequest& request);

  absl::StatusOr<v1::Assignment> RegisterWorker(const std::string& job_id,
                                                const v1::WorkerInfo& worker);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const std::string& job_id,
                                                  const std::string& worker_id);
  // The whole request: a worker's report of a failed transport with it.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  absl::StatusOr<v1::ReportStepResponse> ReportStep(const v1::ReportStepRequest& report);
  // The worker is done with the job (see FinishWorkerRequest).
  absl::StatusOr<v1::Job> FinishWorker(const v1::FinishWorkerRequest& request);
  // Rendezvous key-value space of a job (see planner_service.proto).
  absl::Status RendezvousSet(const std::string& job_id, const std::string& key,
                             const std::string& value);
  // std::nullopt when the key is not set yet.
  absl::StatusOr<std::optional<std::string>> RendezvousGet(const std::string& job_id,
                                                           const std::string& key);
  // The job's most recent step reports, oldest first; limit 0: 1000.
  absl::StatusOr<v1::ListStepReportsResponse> ListStepReports(const std::string& job_id,
                                                              int limit = 0);
  // No timeout: the stream lives until cancelled, the job is deleted or the
  // server shuts down (then Finish is OK).
  std::unique_ptr<PlanWatch> WatchPlan(const v1::WatchPlanRequest& request);

  // The standard health service: true for SERVING. `service` empty: the
  // whole server. Needs no token.
  absl::StatusOr<bool> CheckHealth(const std::string& service = "",
                                   absl::Duration timeout = absl::Seconds(5));

  v1::PlannerService::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  PlannerClient() = default;
  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const;
  // One unary RPC under `timeout` (default: the options' timeout) with the
  // client's token; gRPC errors as absl::Status (common/grpc_status.h).
  // Defined in planner_client.cc, the only place it is called from.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Unary(grpc::Status (v1::PlannerService::Stub::*method)(
                                     grpc::ClientContext*, const Request&, Response*),
                                 const std::type_identity_t<Request>& request,
                                 std::optional<absl::Duration> timeout = std::nullopt);

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PlannerService::Stub> stub_;
};

}  // namespace pipeplan::client

#endif  // PIPEPLAN_CLIENT_PLANNER_CLIENT_H_
