// pipeplan-planner as a library: every server option (listen address,
// message sizes, keepalive, TLS or insecure, bearer token, health, reflection,
// metrics, data directory) lives in ServerConfig, and PlannerServer::Start
// brings the whole service up (Ray's GrpcServer wrapper idea).
//
// Lifecycle: Start binds (port 0 → a free port, read back with port()),
// reports NOT_SERVING on the health service while it recovers state from the
// store, then SERVING. Drain flips health to NOT_SERVING and makes new RPCs
// fail with UNAVAILABLE; Shutdown ends watch streams cleanly, waits for
// in-flight calls (bounded) and stops.
#ifndef PIPEPLAN_SERVER_RPC_SERVER_H_
#define PIPEPLAN_SERVER_RPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/server/rpc/planner_handlers.h"
#include "pipeplan/server/store/store.h"

namespace pipeplan::server {

struct ServerConfig {
  std::string listen = "127.0.0.1:7600";
  // Empty: metrics are not served.
  std::string metrics_listen = "127.0.0.1:7601";
  // Empty: DefaultDataDir().
  std::string data_dir;
  // Where state lives: empty for SQLite in data_dir, or a postgres:// URI
  // (replicated planners share one PostgreSQL database).
  std::string store;
  // TLS when cert and key are set; mutual TLS when client_ca is set too.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // When set, every RPC but health must carry `authorization: Bearer <token>`
  // with the file's first line as token.
  std::string auth_token_file;
  int max_message_bytes = 64 << 20;
  // gRPC's own ResourceQuota (docs/operations.md, "Limits"): the memory
  // gRPC may hold for connections and calls (read buffers, call arenas)
  // before it cancels streams with RESOURCE_EXHAUSTED, and the threads of
  // the synchronous services (reflection). Zero: no bound.
  int64_t grpc_memory_bytes = int64_t{128} << 20;
  int grpc_max_threads = 64;
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // A suspect whose watch closed is lost at the next check (worker_leases.h).
  absl::Duration lease_check_period = absl::Milliseconds(100);
  // How often the replanning policy looks at the jobs (handlers.replan).
  absl::Duration replan_check_period = absl::Milliseconds(500);
  // How often RUNNING jobs' pipeplan_job_* gauges are refreshed from their
  // reports (PlannerHandlers::RefreshJobGauges); zero: only on GetJob.
  absl::Duration job_gauge_period = absl::Seconds(5);
  HandlerOptions handlers;
  // Step reports the store keeps per job: the newest `report_retention`,
  // none older than `report_max_age` (zero: no age limit).
  int report_retention = 10'000;
  absl::Duration report_max_age = absl::ZeroDuration();
  // Replicated planners (a postgres:// store): each job's owner holds a
  // lease of `job_lease` in the store, renewed every job_lease/3; another
  // replica takes the job within about job_lease of its owner's death.
  absl::Duration job_lease = absl::Seconds(10);
  // How often a replica reads the store for the others' writes (new jobs,
  // plan versions for its watchers): the bound on WatchPlan's extra delay.
  absl::Duration store_sync_period = absl::Milliseconds(200);
  // host:port other replicas and operators reach this one at (recorded
  // with its leases); empty: the listen address.
  std::string advertise_address;
};

// $XDG_STATE_HOME/pipeplan, else $HOME/.local/state/pipeplan, else ./pipeplan-data.
std::string DefaultDataDir();

class PlannerServer {
 public:
  // `store` null: the store config.store names (SQLite in config.data_dir
  // when empty). Errors: UNAVAILABLE when the
  // address cannot be bound ("address 127.0.0.1:7600 is in use or not
  // available"), INVALID_ARGUMENT for unreadable TLS/token files, the
  // store's error when the data directory cannot be opened.
  static absl::StatusOr<std::unique_ptr<PlannerServer>> Start(
      ServerConfig config, std::unique_ptr<Store> store = nullptr);
  ~PlannerServer();

  int port() const { return port_; }
  int metrics_port() const;
  // HOST:PORT the metrics endpoint is bound to (host as given in
  // metrics_listen, the real port); empty when metrics are not served.
  std::string metrics_address() const;
  const std::string& host() const { return host_; }

  void Drain();
  // Drains, waits `grace` for in-flight calls, then stops. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));

  PlannerHandlers& handlers();

 private:
  PlannerServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::string host_;
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_RPC_SERVER_H_
