// The server wrapper that owns every option and brings the planner up: the
// gRPC adapter (grpc_adapter.h) over the handlers, the store, health,
// metrics, and the lease and replan threads.
#include "pipeplan/server/rpc/server.h"

#include <grpc/grpc.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
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
#include "grpc_adapter.h"
#include "pipeplan/common/file_reader.h"
#include "pipeplan/common/grpc_status.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/server/jobs/job_ownership.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/obs/metrics.h"
#include "pipeplan/server/store/write_health_store.h"

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

// The base library's reader; an empty credential file is a mistake to name
// at start rather than a TLS handshake failure later.
absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::string text, common::ReadFileToString(path, what));
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is empty"));
  return text;
}

// TLS (mutual when a client CA is given) or insecure credentials.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> CredentialsFor(
    const ServerConfig& config) {
  if (config.tls_cert_file.empty() && config.tls_key_file.empty()) {
    if (!config.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
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
  return grpc::SslServerCredentials(opts);
}

// The first line of the token file; empty when no token is configured.
absl::StatusOr<std::string> BearerToken(const ServerConfig& config) {
  if (config.auth_token_file.empty()) return std::string();
  PIPEPLAN_ASSIGN_OR_RETURN(std::string text, ReadFile(config.auth_token_file, "token file"));
  std::string token(absl::StripAsciiWhitespace(text.substr(0, text.find('\n'))));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", config.auth_token_file, " has an empty first line"));
  }
  return token;
}

// The store the planner runs on: the one passed in (tests), PostgreSQL for a
// postgres:// URI, else SQLite in --data-dir (set to the default when empty).
absl::StatusOr<std::unique_ptr<Store>> OpenStore(ServerConfig& config,
                                                 std::unique_ptr<Store> store) {
  if (store) return store;
  if (IsPostgresUrl(config.store)) {
    return OpenPostgresStore(config.store, {.report_window = config.report_retention,
                                            .report_max_age = config.report_max_age});
  }
  if (!config.store.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: want a postgres:// or postgresql:// URI, got \"",
                     RedactedStoreUrl(config.store), "\" (leave it out for SQLite in --data-dir)"));
  }
  if (config.data_dir.empty()) config.data_dir = DefaultDataDir();
  return OpenSqliteStore(config.data_dir, {.report_window = config.report_retention,
                                           .report_max_age = config.report_max_age});
}

// The gRPC server with the planner's limits and keepalive policy; null (and
// *port 0) when it cannot listen.
std::unique_ptr<grpc::Server> BuildGrpcServer(const ServerConfig& config,
                                              std::shared_ptr<grpc::ServerCredentials> creds,
                                              grpc::Service* service, int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, std::move(creds), port);
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  builder.SetMaxSendMessageSize(config.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_time)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_timeout)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  // Bounds what gRPC holds before a request reaches the solve budget; the
  // builder keeps its own reference to the quota.
  if (config.grpc_memory_bytes > 0 || config.grpc_max_threads > 0) {
    grpc::ResourceQuota quota("pipeplan-planner");
    if (config.grpc_memory_bytes > 0) quota.Resize(static_cast<size_t>(config.grpc_memory_bytes));
    if (config.grpc_max_threads > 0) quota.SetMaxThreads(config.grpc_max_threads);
    builder.SetResourceQuota(quota);
  }
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

}  // namespace

struct PlannerServer::Impl {
  ServerConfig config;
  std::unique_ptr<Metrics> metrics;
  std::unique_ptr<Store> store;
  std::unique_ptr<PlannerHandlers> handlers;
  std::unique_ptr<JobOwnership> ownership;  // replicated (shared store) only
  std::thread sync_thread;
  std::unique_ptr<GrpcAdapter> adapter;
  std::unique_ptr<grpc::Server> server;
  absl::Notification stop_leases;
  std::thread lease_thread;
  std::thread replan_thread;
  std::thread gauge_thread;
  std::atomic<bool> shut_down{false};
  // Recovered and not draining: health may follow the store.
  std::atomic<bool> serving{false};

  // The background loops: leases, store sync (replicated), replans, job
  // gauges; each wakes every period until stop_leases.
  void StartLoops(const ServerConfig& c);
  // The planner_started line: where it listens, its store and its jobs.
  void LogStarted(const std::string& listen, const std::string& metrics_address,
                  const std::string& token) const;

  void SetHealth(bool serving) {
    if (!server) return;
    if (auto* h = server->GetHealthCheckService()) {
      h->SetServingStatus(serving);
      h->SetServingStatus(kServiceName, serving);
    }
  }
};

PlannerServer::PlannerServer() : impl_(new Impl) {}

void PlannerServer::Impl::StartLoops(const ServerConfig& c) {
  auto every = [this](absl::Duration period, auto work) {
    return std::thread([this, period, work] {
      while (!stop_leases.WaitForNotificationWithTimeout(period)) work();
    });
  };
  // A worker declared lost is replanned around at once, not at the replan
  // loop's next tick: detection is the bulk of a recovery (issue 26).
  lease_thread = every(c.lease_check_period, [this, replan = c.handlers.replan.enabled] {
    if (handlers->registry().CheckLeases() > 0 && replan) handlers->replan_policy().Tick();
  });
  if (ownership) {
    // Synced once at once: a replica follows the others from the start.
    sync_thread = std::thread([this, period = c.store_sync_period] {
      do {
        if (absl::Status synced = handlers->registry().SyncFromStore(); !synced.ok()) {
          LogWarn("store_sync_failed", {{"error", std::string(synced.message())}});
        }
      } while (!stop_leases.WaitForNotificationWithTimeout(period));
    });
  }
  if (c.handlers.replan.enabled) {
    replan_thread = every(c.replan_check_period, [this] { handlers->replan_policy().Tick(); });
  }
  if (c.job_gauge_period > absl::ZeroDuration() && metrics) {
    gauge_thread = every(c.job_gauge_period, [this] { handlers->RefreshJobGauges(); });
  }
}

PlannerServer::~PlannerServer() { Shutdown(absl::Seconds(1)); }

PlannerHandlers& PlannerServer::handlers() { return *impl_->handlers; }

int PlannerServer::metrics_port() const { return impl_->metrics ? impl_->metrics->port() : 0; }

std::string PlannerServer::metrics_address() const {
  return impl_->metrics ? impl_->metrics->address() : std::string();
}

absl::StatusOr<std::unique_ptr<PlannerServer>> PlannerServer::Start(ServerConfig config,
                                                                    std::unique_ptr<Store> store) {
  std::unique_ptr<PlannerServer> s(new PlannerServer());
  Impl& impl = *s->impl_;

  // Credentials and token first: bad files fail before anything binds.
  PIPEPLAN_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, CredentialsFor(config));
  PIPEPLAN_ASSIGN_OR_RETURN(std::string token, BearerToken(config));

  PIPEPLAN_ASSIGN_OR_RETURN(impl.metrics, Metrics::Create(config.metrics_listen));
  PIPEPLAN_ASSIGN_OR_RETURN(store, OpenStore(config, std::move(store)));
  // Health follows the store's writes: NOT_SERVING while the disk is full
  // or read-only (reads are still answered), SERVING once a write succeeds.
  impl.store = WithWriteHealth(std::move(store), [&impl](bool writing) {
    if (impl.serving.load()) impl.SetHealth(writing);
    LogWarn(writing ? "store_writable" : "store_not_writable", {});
  });
  impl.handlers = std::make_unique<PlannerHandlers>(config.handlers, impl.store.get(), RealClock(),
                                                    impl.metrics.get());
  impl.adapter = std::make_unique<GrpcAdapter>(impl.handlers.get(), impl.metrics.get(), token);

  int port = 0;
  impl.server = BuildGrpcServer(config, creds, impl.adapter->service(), &port);
  if (!impl.server || port == 0) {
    impl.server.reset();
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", config.listen,
        ": the address is in use or not available (is another pipeplan-planner running?)"));
  }
  s->port_ = port;
  s->host_ = config.listen.substr(0, config.listen.rfind(':'));

  if (impl.store->shared()) {
    std::string address = config.advertise_address;
    if (address.empty()) address = absl::StrCat(s->host_, ":", port);
    impl.ownership = std::make_unique<JobOwnership>(
        impl.store.get(), JobOwnership::Options{NewReplicaId(), address, config.job_lease});
    impl.handlers->registry().EnableReplication(impl.ownership.get());
  }
  // Health says NOT_SERVING until the state is back.
  impl.SetHealth(false);
  if (absl::Status r = impl.handlers->Recover(); !r.ok()) {
    impl.server->Shutdown();
    return absl::Status(r.code(), absl::StrCat("recovering from the store: ", r.message()));
  }
  impl.adapter->set_state(GrpcAdapter::State::kServing);
  impl.SetHealth(true);
  impl.serving.store(true);

  impl.StartLoops(config);
  impl.config = std::move(config);
  impl.LogStarted(absl::StrCat(s->host_, ":", port), s->metrics_address(), token);
  return s;
}

void PlannerServer::Impl::LogStarted(const std::string& listen, const std::string& metrics_address,
                                     const std::string& token) const {
  const JobRegistry::Counts c = handlers->registry().counts();
  LogInfo("planner_started",
          {{"listen", listen},
           {"metrics", metrics_address},
           {"store", config.store.empty() ? absl::StrCat("sqlite:", config.data_dir)
                                          : RedactedStoreUrl(config.store)},
           {"jobs", absl::StrCat(c.jobs)},
           {"replica", ownership ? ownership->options().replica_id : "single"},
           {"tls", config.tls_cert_file.empty() ? "off" : "on"},
           {"auth", token.empty() ? "off" : "token"}});
}

void PlannerServer::Drain() {
  if (!impl_->adapter) return;
  impl_->serving.store(false);
  impl_->adapter->set_state(GrpcAdapter::State::kDraining);
  impl_->SetHealth(false);
}

void PlannerServer::Shutdown(absl::Duration grace) {
  if (impl_->shut_down.exchange(true)) return;
  if (!impl_->server) return;
  LogInfo("planner_stopping", {});
  Drain();
  impl_->handlers->registry().CloseAllWatchers(absl::OkStatus());
  impl_->server->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
  impl_->stop_leases.Notify();
  if (impl_->lease_thread.joinable()) impl_->lease_thread.join();
  if (impl_->replan_thread.joinable()) impl_->replan_thread.join();
  if (impl_->gauge_thread.joinable()) impl_->gauge_thread.join();
  if (impl_->sync_thread.joinable()) impl_->sync_thread.join();
  impl_->handlers->Shutdown();
  LogInfo("planner_stopped", {});
}

}  // namespace pipeplan::server
