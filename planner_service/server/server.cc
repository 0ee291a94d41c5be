// The gRPC face of the planner: a thin callback-API adapter over
// PlannerServiceImpl, and the server wrapper that owns every option.
#include "pipeplan/server/server.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "pipeplan/core/status_macros.h"
#include "pipeplan/server/log.h"
#include "pipeplan/server/metrics.h"
#include "pipeplan/server/status_map.h"
#include "pipeplan/v1/planner_service.grpc.pb.h"

namespace pipeplan::server {

std::string DefaultDataDir() {
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg) {
    return absl::StrCat(xdg, "/pipeplan");
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return absl::StrCat(home, "/.local/state/pipeplan");
  }
  return "./pipeplan-data";
}

namespace {

constexpr char kServiceName[] = "pipeplan.v1.PlannerService";

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty())
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is empty"));
  return ss.str();
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  const auto d = ctx->deadline();
  if (d >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

std::string CodeName(const absl::Status& s) { return absl::StatusCodeToString(s.code()); }

enum class State { kRecovering, kServing, kDraining };

// Streams plan versions to one worker. The registry holds a weak_ptr to the
// sink; the reactor owns it, so a finished stream simply stops receiving.
class WatchReactor : public grpc::ServerWriteReactor<v1::PlanUpdate> {
 public:
  class Sink : public PlanWatcher {
   public:
    explicit Sink(WatchReactor* r) : reactor_(r) {}
    void OnPlan(std::shared_ptr<const v1::PlanUpdate> update) override {
      absl::MutexLock l(&mu_);
      if (!reactor_ || finished_) return;
      queue_.push_back(std::move(update));
      if (!writing_) WriteNextLocked();
    }
    void OnClose(const absl::Status& status) override {
      absl::MutexLock l(&mu_);
      if (!reactor_ || finished_) return;
      if (writing_) {
        pending_close_ = status;
        return;
      }
      FinishLocked(status);
    }
    void WriteDone(bool ok) {
      absl::MutexLock l(&mu_);
      writing_ = false;
      if (!queue_.empty()) queue_.pop_front();
      if (!reactor_ || finished_) return;
      if (!ok) return FinishLocked(absl::CancelledError("stream broken"));
      if (pending_close_) return FinishLocked(*pending_close_);
      if (!queue_.empty()) WriteNextLocked();
    }
    void Cancel() {
      absl::MutexLock l(&mu_);
      if (reactor_ && !finished_) FinishLocked(absl::CancelledError("watch cancelled"));
    }
    void Detach() {
      absl::MutexLock l(&mu_);
      reactor_ = nullptr;
    }
    void FailOrFinish(const absl::Status& s) {
      absl::MutexLock l(&mu_);
      if (reactor_ && !finished_) FinishLocked(s);
    }

   private:
    void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      writing_ = true;
      reactor_->StartWrite(queue_.front().get());
    }
    void FinishLocked(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      finished_ = true;
      reactor_->Finish(ToGrpcStatus(s));
    }
    absl::Mutex mu_;
    WatchReactor* reactor_ ABSL_GUARDED_BY(mu_);
    std::deque<std::shared_ptr<const v1::PlanUpdate>> queue_ ABSL_GUARDED_BY(mu_);
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
    std::optional<absl::Status> pending_close_ ABSL_GUARDED_BY(mu_);
  };

  WatchReactor() : sink_(std::make_shared<Sink>(this)) {}
  std::shared_ptr<Sink> sink() { return sink_; }
  void OnWriteDone(bool ok) override { sink_->WriteDone(ok); }
  void OnCancel() override { sink_->Cancel(); }
  void OnDone() override {
    sink_->Detach();
    delete this;
  }

 private:
  std::shared_ptr<Sink> sink_;
};

// Unary call whose answer comes later, from the solver pool.
class SolveReactor : public grpc::ServerUnaryReactor {
 public:
  void OnCancel() override { ctx.cancelled->store(true); }
  void OnDone() override { delete this; }
  CallContext ctx;
};

}  // namespace

class GrpcPlannerService final : public v1::PlannerService::CallbackService {
 public:
  GrpcPlannerService(PlannerServiceImpl* impl, Metrics* metrics, std::string token)
      : impl_(impl), metrics_(metrics), token_(std::move(token)) {}

  void set_state(State s) { state_.store(s); }

  grpc::ServerUnaryReactor* Plan(grpc::CallbackServerContext* ctx, const v1::PlanRequest* req,
                                 v1::Plan* resp) override {
    return Solve<v1::Plan>(ctx, "Plan", resp, [&](const CallContext& cc, Callback<v1::Plan> done) {
      impl_->HandlePlan(*req, cc, std::move(done));
    });
  }
  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx,
                                      const v1::CreateJobRequest* req, v1::Job* resp) override {
    return Solve<v1::Job>(ctx, "CreateJob", resp,
                          [&](const CallContext& cc, Callback<v1::Job> done) {
                            impl_->HandleCreateJob(*req, cc, std::move(done));
                          });
  }
  grpc::ServerUnaryReactor* ReplanJob(grpc::CallbackServerContext* ctx,
                                      const v1::ReplanJobRequest* req,
                                      v1::VersionedPlan* resp) override {
    return Solve<v1::VersionedPlan>(ctx, "ReplanJob", resp,
                                    [&](const CallContext& cc, Callback<v1::VersionedPlan> done) {
                                      impl_->HandleReplanJob(*req, cc, std::move(done));
                                    });
  }
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::Job* resp) override {
    return Unary(ctx, "GetJob", resp, [&] { return impl_->GetJob(*req); });
  }
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override {
    return Unary(ctx, "ListJobs", resp, [&] { return impl_->ListJobs(*req); });
  }
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const v1::DeleteJobRequest* req,
                                      v1::DeleteJobResponse* resp) override {
    return Unary(ctx, "DeleteJob", resp, [&] { return impl_->DeleteJob(*req); });
  }
  grpc::ServerUnaryReactor* GetPlan(grpc::CallbackServerContext* ctx, const v1::GetPlanRequest* req,
                                    v1::VersionedPlan* resp) override {
    return Unary(ctx, "GetPlan", resp, [&] { return impl_->GetPlan(*req); });
  }
  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* ctx,
                                           const v1::RegisterWorkerRequest* req,
                                           v1::Assignment* resp) override {
    return Unary(ctx, "RegisterWorker", resp, [&] { return impl_->RegisterWorker(*req); });
  }
  grpc::ServerUnaryReactor* ReportStep(grpc::CallbackServerContext* ctx,
                                       const v1::ReportStepRequest* req,
                                       v1::ReportStepResponse* resp) override {
    return Unary(ctx, "ReportStep", resp, [&] { return impl_->ReportStep(*req); });
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override {
    return Unary(ctx, "Heartbeat", resp, [&] { return impl_->Heartbeat(*req); });
  }
  grpc::ServerUnaryReactor* FinishWorker(grpc::CallbackServerContext* ctx,
                                         const v1::FinishWorkerRequest* req,
                                         v1::Job* resp) override {
    return Unary(ctx, "FinishWorker", resp, [&] { return impl_->FinishWorker(*req); });
  }
  grpc::ServerUnaryReactor* RendezvousSet(grpc::CallbackServerContext* ctx,
                                          const v1::RendezvousSetRequest* req,
                                          v1::RendezvousSetResponse* resp) override {
    return Unary(ctx, "RendezvousSet", resp, [&] { return impl_->RendezvousSet(*req); });
  }
  grpc::ServerUnaryReactor* RendezvousGet(grpc::CallbackServerContext* ctx,
                                          const v1::RendezvousGetRequest* req,
                                          v1::RendezvousGetResponse* resp) override {
    return Unary(ctx, "RendezvousGet", resp, [&] { return impl_->RendezvousGet(*req); });
  }
  grpc::ServerUnaryReactor* ListStepReports(grpc::CallbackServerContext* ctx,
                                            const v1::ListStepReportsRequest* req,
                                            v1::ListStepReportsResponse* resp) override {
    return Unary(ctx, "ListStepReports", resp, [&] { return impl_->ListStepReports(*req); });
  }

  grpc::ServerWriteReactor<v1::PlanUpdate>* WatchPlan(grpc::CallbackServerContext* ctx,
                                                      const v1::WatchPlanRequest* req) override {
    auto* reactor = new WatchReactor();
    absl::Status s = Admit(ctx);
    if (s.ok()) s = impl_->WatchPlan(*req, reactor->sink());
    Count("WatchPlan", s);
    if (!s.ok()) reactor->sink()->FailOrFinish(s);
    return reactor;
  }

 private:
  absl::Status Admit(grpc::CallbackServerContext* ctx) const {
    switch (state_.load()) {
      case State::kRecovering:
        return absl::UnavailableError("the planner is recovering its state; retry");
      case State::kDraining:
        return absl::UnavailableError("the planner is shutting down; retry on another replica");
      case State::kServing:
        break;
    }
    if (token_.empty()) return absl::OkStatus();
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      return absl::UnauthenticatedError("missing \"authorization: Bearer <token>\" metadata");
    }
    const std::string_view value(it->second.data(), it->second.size());
    constexpr std::string_view kBearer = "Bearer ";
    if (value.size() < kBearer.size() ||
        absl::AsciiStrToLower(std::string(value.substr(0, kBearer.size()))) != "bearer " ||
        !ConstantTimeEquals(value.substr(kBearer.size()), token_)) {
      return absl::UnauthenticatedError("invalid bearer token");
    }
    return absl::OkStatus();
  }

  void Count(std::string_view method, const absl::Status& s) {
    if (metrics_) metrics_->CountRequest(method, CodeName(s));
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      LogInfo("rpc_error", {{"method", std::string(method)},
                            {"code", CodeName(s)},
                            {"message", std::string(s.message().substr(0, 300))}});
    }
  }

  template <typename Resp, typename F>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, std::string_view method,
                                  Resp* resp, F fn) {
    auto* reactor = ctx->DefaultReactor();
    absl::Status s = Admit(ctx);
    if (s.ok()) {
      absl::StatusOr<Resp> r = fn();
      if (r.ok()) {
        *resp = *std::move(r);
      } else {
        s = r.status();
      }
    }
    Count(method, s);
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }

  template <typename Resp, typename F>
  grpc::ServerUnaryReactor* Solve(grpc::CallbackServerContext* ctx, std::string_view method,
                                  Resp* resp, F start) {
    auto* reactor = new SolveReactor();
    absl::Status s = Admit(ctx);
    if (!s.ok()) {
      Count(method, s);
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    reactor->ctx.deadline = DeadlineOf(ctx);
    std::string m(method);
    start(reactor->ctx, [this, reactor, resp, m](absl::StatusOr<Resp> r) {
      absl::Status st = r.status();
      if (r.ok()) *resp = *std::move(r);
      Count(m, st);
      reactor->Finish(ToGrpcStatus(st));
    });
    return reactor;
  }

  PlannerServiceImpl* const impl_;
  Metrics* const metrics_;
  const std::string token_;
  std::atomic<State> state_{State::kRecovering};
};

struct PlannerServer::Impl {
  ServerConfig config;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Store> store;
  std::unique_ptr<PlannerServiceImpl> service;
  std::unique_ptr<GrpcPlannerService> grpc_service;
  std::unique_ptr<grpc::Server> server;
  absl::Notification stop_leases;
  std::thread lease_thread;
  std::thread replan_thread;
  std::atomic<bool> shut_down{false};

  void SetHealth(bool serving) {
    if (!server) return;
    if (auto* h = server->GetHealthCheckService()) {
      h->SetServingStatus(serving);
      h->SetServingStatus(kServiceName, serving);
    }
  }
};

PlannerServer::PlannerServer() : impl_(new Impl) {}

PlannerServer::~PlannerServer() { Shutdown(absl::Seconds(1)); }

PlannerServiceImpl& PlannerServer::service() { return *impl_->service; }

int PlannerServer::metrics_port() const { return impl_->metrics ? impl_->metrics->port() : 0; }

absl::StatusOr<std::unique_ptr<PlannerServer>> PlannerServer::Start(ServerConfig config,
                                                                    std::unique_ptr<Store> store) {
  std::unique_ptr<PlannerServer> s(new PlannerServer());
  Impl& impl = *s->impl_;

  // Credentials and token first: bad files fail before anything binds.
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!config.tls_cert_file.empty() || !config.tls_key_file.empty()) {
    if (config.tls_cert_file.empty() || config.tls_key_file.empty()) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
    }
    PIPEPLAN_ASSIGN_OR_RETURN(std::string cert, ReadFile(config.tls_cert_file, "TLS certificate"));
    PIPEPLAN_ASSIGN_OR_RETURN(std::string key, ReadFile(config.tls_key_file, "TLS key"));
    grpc::SslServerCredentialsOptions opts(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    if (!config.tls_client_ca_file.empty()) {
      PIPEPLAN_ASSIGN_OR_RETURN(opts.pem_root_certs,
                                ReadFile(config.tls_client_ca_file, "TLS client CA"));
      opts.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    opts.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(opts);
  } else if (!config.tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  std::string token;
  if (!config.auth_token_file.empty()) {
    PIPEPLAN_ASSIGN_OR_RETURN(std::string text, ReadFile(config.auth_token_file, "token file"));
    token = std::string(absl::StripAsciiWhitespace(text.substr(0, text.find('\n'))));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file ", config.auth_token_file, " has an empty first line"));
    }
  }

  PIPEPLAN_ASSIGN_OR_RETURN(impl.metrics, Metrics::Create(config.metrics_listen));
  if (!store) {
    if (config.data_dir.empty()) config.data_dir = DefaultDataDir();
    PIPEPLAN_ASSIGN_OR_RETURN(store, OpenSqliteStore(config.data_dir));
  }
  impl.store = std::move(store);
  impl.service = std::make_unique<PlannerServiceImpl>(config.service, impl.store.get(), RealClock(),
                                                      impl.metrics.get());
  impl.grpc_service =
      std::make_unique<GrpcPlannerService>(impl.service.get(), impl.metrics.get(), token);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config.listen, creds, &port);
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  builder.SetMaxSendMessageSize(config.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_time)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_timeout)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.RegisterService(impl.grpc_service.get());
  impl.server = builder.BuildAndStart();
  if (!impl.server || port == 0) {
    impl.server.reset();
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", config.listen,
        ": the address is in use or not available (is another pipeplan-planner running?)"));
  }
  s->port_ = port;
  s->host_ = config.listen.substr(0, config.listen.rfind(':'));

  // Health says NOT_SERVING until the state is back.
  impl.SetHealth(false);
  if (absl::Status r = impl.service->Recover(); !r.ok()) {
    impl.server->Shutdown();
    return absl::Status(r.code(), absl::StrCat("recovering from the store: ", r.message()));
  }
  impl.grpc_service->set_state(State::kServing);
  impl.SetHealth(true);

  const absl::Duration period = config.lease_check_period;
  impl.lease_thread = std::thread([&impl, period] {
    while (!impl.stop_leases.WaitForNotificationWithTimeout(period)) {
      impl.service->registry().CheckLeases();
    }
  });
  if (config.service.replan.enabled) {
    const absl::Duration replan_period = config.replan_check_period;
    impl.replan_thread = std::thread([&impl, replan_period] {
      while (!impl.stop_leases.WaitForNotificationWithTimeout(replan_period)) {
        impl.service->replan_policy().Tick();
      }
    });
  }
  impl.config = std::move(config);
  const JobRegistry::Counts c = impl.service->registry().counts();
  LogInfo("planner_started", {{"listen", absl::StrCat(s->host_, ":", port)},
                              {"metrics_port", absl::StrCat(s->metrics_port())},
                              {"data_dir", impl.config.data_dir},
                              {"jobs", absl::StrCat(c.jobs)},
                              {"tls", impl.config.tls_cert_file.empty() ? "off" : "on"},
                              {"auth", token.empty() ? "off" : "token"}});
  return s;
}

void PlannerServer::Drain() {
  if (!impl_->grpc_service) return;
  impl_->grpc_service->set_state(State::kDraining);
  impl_->SetHealth(false);
}

void PlannerServer::Shutdown(absl::Duration grace) {
  if (impl_->shut_down.exchange(true)) return;
  if (!impl_->server) return;
  LogInfo("planner_stopping", {});
  Drain();
  impl_->service->registry().CloseAllWatchers(absl::OkStatus());
  impl_->server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
  impl_->stop_leases.Notify();
  if (impl_->lease_thread.joinable()) impl_->lease_thread.join();
  if (impl_->replan_thread.joinable()) impl_->replan_thread.join();
  impl_->service->Shutdown();
  LogInfo("planner_stopped", {});
}

}  // namespace pipeplan::server
