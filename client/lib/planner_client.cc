#include "pipeplan/client/planner_client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "pipeplan/common/file_reader.h"
#include "pipeplan/common/grpc_status.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan::client {
namespace {

// One address as a numeric "ip:port" ("[ip6]:port"); *v6 says which family.
absl::StatusOr<std::string> Numeric(const std::string& address, bool* v6) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner address \"", address, "\" is not HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve planner host \"", host, "\""));
  }
  char ip[NI_MAXHOST];
  const int rc =
      getnameinfo(found->ai_addr, found->ai_addrlen, ip, sizeof(ip), nullptr, 0, NI_NUMERICHOST);
  *v6 = found->ai_family == AF_INET6;
  freeaddrinfo(found);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("cannot resolve \"", host, "\""));
  return *v6 ? absl::StrCat("[", ip, "]", address.substr(colon))
             : absl::StrCat(ip, address.substr(colon));
}

// The gRPC target of ClientOptions::address: one address as given, a
// comma-separated list as an ipv4:/ipv6: target that pick_first walks in
// order (the first planner that answers; the next one when it dies).
absl::StatusOr<std::string> ChannelTarget(const std::string& address) {
  if (address.find(',') == std::string::npos) return address;
  std::vector<std::string> numeric;
  bool any_v4 = false, any_v6 = false;
  for (absl::string_view part : absl::StrSplit(address, ',', absl::SkipWhitespace())) {
    bool v6 = false;
    PIPEPLAN_ASSIGN_OR_RETURN(std::string n,
                              Numeric(std::string(absl::StripAsciiWhitespace(part)), &v6));
    (v6 ? any_v6 : any_v4) = true;
    numeric.push_back(std::move(n));
  }
  if (any_v4 && any_v6) {
    return absl::InvalidArgumentError(
        absl::StrCat("planner addresses \"", address, "\" mix IPv4 and IPv6"));
  }
  return absl::StrCat(any_v6 ? "ipv6:" : "ipv4:", absl::StrJoin(numeric, ","));
}

using common::FromGrpcStatus;

class GrpcPlanWatch : public PlanWatch {
 public:
  GrpcPlanWatch(std::unique_ptr<grpc::ClientContext> ctx, v1::PlannerService::Stub* stub,
                const v1::WatchPlanRequest& request)
      : ctx_(std::move(ctx)), reader_(stub->WatchPlan(ctx_.get(), request)) {}
  ~GrpcPlanWatch() override {
    if (!finished_) {
      ctx_->TryCancel();
      v1::PlanUpdate drain;
      while (reader_->Read(&drain)) {
      }
      (void)reader_->Finish();
    }
  }
  bool Next(v1::PlanUpdate* update) override { return reader_->Read(update); }
  void Cancel() override { ctx_->TryCancel(); }
  absl::Status Finish() override {
    finished_ = true;
    return FromGrpcStatus(reader_->Finish());
  }

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReader<v1::PlanUpdate>> reader_;
  bool finished_ = false;
};

// TLS credentials from the options' files, or insecure ones without them.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> CredentialsFor(
    const ClientOptions& options) {
  if (options.tls_ca_file.empty() && options.tls_cert_file.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca_file.empty()) {
    PIPEPLAN_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                              common::ReadFileToString(options.tls_ca_file, "TLS CA"));
  }
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
    }
    PIPEPLAN_ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                              common::ReadFileToString(options.tls_cert_file, "TLS certificate"));
    PIPEPLAN_ASSIGN_OR_RETURN(ssl.pem_private_key,
                              common::ReadFileToString(options.tls_key_file, "TLS key"));
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerClient>> PlannerClient::Connect(
    const ClientOptions& options) {
  std::unique_ptr<PlannerClient> c(new PlannerClient());
  c->options_ = options;
  if (c->options_.token.empty() && !options.token_file.empty()) {
    PIPEPLAN_ASSIGN_OR_RETURN(std::string text,
                              common::ReadFileToString(options.token_file, "token file"));
    c->options_.token = std::string(absl::StripAsciiWhitespace(text.substr(0, text.find('\n'))));
    if (c->options_.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file ", options.token_file, " has an empty first line"));
    }
  }
  PIPEPLAN_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds,
                            CredentialsFor(options));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // Reconnect within a second of a restarted planner (gRPC's default backoff
  // grows to two minutes): workers must heartbeat again within the grace
  // period of one lease that a restarted planner gives them.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC also takes this as the least time one connection attempt may wait
  // for the server's HTTP/2 SETTINGS. At 100 ms a planner that answered its
  // handshake 0.5 s late (a loaded host, a sanitizer build) failed the call
  // at once with UNAVAILABLE. At 5 s, workers reconnected to a restarted
  // planner too late for its lease grace (ElasticPlannerOutage lost two of
  // four, 2 of 2 runs; not root-caused in gRPC), so it is the 1 s of the
  // longest backoff.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  PIPEPLAN_ASSIGN_OR_RETURN(std::string target, ChannelTarget(options.address));
  if (target != options.address) {
    // Several planner replicas: keep to one until it fails, then the next.
    args.SetLoadBalancingPolicyName("pick_first");
    if (!options.tls_ca_file.empty() || !options.tls_cert_file.empty()) {
      // The certificate names the first address's host, not its IP.
      const std::string first = options.address.substr(0, options.address.find(','));
      args.SetSslTargetNameOverride(first.substr(0, first.rfind(':')));
    }
  }
  c->channel_ = grpc::CreateCustomChannel(target, creds, args);
  c->stub_ = v1::PlannerService::NewStub(c->channel_);
  return c;
}

void PlannerClient::Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const {
  if (timeout != absl::InfiniteDuration()) {
    ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  }
  if (!options_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.token);
}

template <typename Request, typename Response>
absl::StatusOr<Response> PlannerClient::Unary(grpc::Status (v1::PlannerService::Stub::*method)(
                                                  grpc::ClientContext*, const Request&, Response*),
                                              const std::type_identity_t<Request>& request,
                                              std::optional<absl::Duration> timeout) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout.value_or(options_.timeout));
  Response response;
  grpc::Status s = (stub_.get()->*method)(&ctx, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<v1::Plan> PlannerClient::Plan(const v1::PlanRequest& request) {
  return Plan(request, options_.timeout);
}

absl::StatusOr<v1::Plan> PlannerClient::Plan(const v1::PlanRequest& request,
                                             absl::Duration timeout) {
  return Unary(&v1::PlannerService::Stub::Plan, request, timeout);
}

absl::StatusOr<v1::Job> PlannerClient::CreateJob(const std::string& name,
                                                 const v1::PlanRequest& request,
                                                 const v1::TrainingSpec& training) {
  v1::CreateJobRequest req;
  req.set_name(name);
  *req.mutable_request() = request;
  if (training.ByteSizeLong() > 0) *req.mutable_training() = training;
  return Unary(&v1::PlannerService::Stub::CreateJob, req);
}

absl::StatusOr<v1::Job> PlannerClient::GetJob(const std::string& job_id) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  return Unary(&v1::PlannerService::Stub::GetJob, req);
}

absl::StatusOr<v1::ListJobsResponse> PlannerClient::ListJobs() {
  return Unary(&v1::PlannerService::Stub::ListJobs, v1::ListJobsRequest());
}

absl::Status PlannerClient::DeleteJob(const std::string& job_id) {
  v1::DeleteJobRequest req;
  req.set_job_id(job_id);
  return Unary(&v1::PlannerService::Stub::DeleteJob, req).status();
}

absl::StatusOr<v1::Job> PlannerClient::CancelJob(const std::string& job_id,
                                                 const std::string& reason) {
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  req.set_reason(reason);
  return Unary(&v1::PlannerService::Stub::CancelJob, req);
}

absl::StatusOr<v1::VersionedPlan> PlannerClient::GetPlan(const std::string& job_id,
                                                         int64_t version) {
  v1::GetPlanRequest req;
  req.set_job_id(job_id);
  req.set_version(version);
  return Unary(&v1::PlannerService::Stub::GetPlan, req);
}

absl::StatusOr<v1::VersionedPlan> PlannerClient::GetContingencies(const std::string& job_id,
                                                                  int64_t version,
                                                                  int64_t known_generation) {
  v1::GetPlanRequest req;
  req.set_job_id(job_id);
  req.set_version(version);
  req.set_view(v1::PLAN_VIEW_CONTINGENCIES);
  req.set_known_contingency_generation(known_generation);
  return Unary(&v1::PlannerService::Stub::GetPlan, req);
}

absl::StatusOr<v1::VersionedPlan> PlannerClient::ReplanJob(const v1::ReplanJobRequest& request) {
  return Unary(&v1::PlannerService::Stub::ReplanJob, request);
}

absl::StatusOr<v1::Assignment> PlannerClient::RegisterWorker(const std::string& job_id,
                                                             const v1::WorkerInfo& worker) {
  v1::RegisterWorkerRequest req;
  req.set_job_id(job_id);
  *req.mutable_worker() = worker;
  return Unary(&v1::PlannerService::Stub::RegisterWorker, req);
}

absl::StatusOr<v1::HeartbeatResponse> PlannerClient::Heartbeat(const std::string& job_id,
                                                               const std::string& worker_id) {
  v1::HeartbeatRequest req;
  req.set_job_id(job_id);
  req.set_worker_id(worker_id);
  return Unary(&v1::PlannerService::Stub::Heartbeat, req);
}

absl::StatusOr<v1::HeartbeatResponse> PlannerClient::Heartbeat(
    const v1::HeartbeatRequest& request) {
  return Unary(&v1::PlannerService::Stub::Heartbeat, request);
}

absl::StatusOr<v1::Job> PlannerClient::FinishWorker(const v1::FinishWorkerRequest& request) {
  return Unary(&v1::PlannerService::Stub::FinishWorker, request);
}

absl::Status PlannerClient::RendezvousSet(const std::string& job_id, const std::string& key,
                                          const std::string& value) {
  v1::RendezvousSetRequest req;
  req.set_job_id(job_id);
  req.set_key(key);
  req.set_value(value);
  return Unary(&v1::PlannerService::Stub::RendezvousSet, req).status();
}

absl::StatusOr<std::optional<std::string>> PlannerClient::RendezvousGet(const std::string& job_id,
                                                                        const std::string& key) {
  v1::RendezvousGetRequest req;
  req.set_job_id(job_id);
  req.set_key(key);
  absl::StatusOr<v1::RendezvousGetResponse> r =
      Unary(&v1::PlannerService::Stub::RendezvousGet, req);
  if (!r.ok()) return r.status();
  if (!r->found()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(*r->mutable_value()));
}

absl::StatusOr<v1::ListStepReportsResponse> PlannerClient::ListStepReports(
    const std::string& job_id, int limit) {
  v1::ListStepReportsRequest req;
  req.set_job_id(job_id);
  req.set_limit(limit);
  return Unary(&v1::PlannerService::Stub::ListStepReports, req);
}

absl::StatusOr<v1::ReportStepResponse> PlannerClient::ReportStep(
    const v1::ReportStepRequest& report) {
  return Unary(&v1::PlannerService::Stub::ReportStep, report);
}

std::unique_ptr<PlanWatch> PlannerClient::WatchPlan(const v1::WatchPlanRequest& request) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  Prepare(ctx.get(), absl::InfiniteDuration());
  return std::make_unique<GrpcPlanWatch>(std::move(ctx), stub_.get(), request);
}

absl::StatusOr<bool> PlannerClient::CheckHealth(const std::string& service,
                                                absl::Duration timeout) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = health->Check(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace pipeplan::client
