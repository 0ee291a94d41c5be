// pipeplan-planner: the planning service.
//
//   pipeplan-planner [--listen 127.0.0.1:7600] [--data-dir DIR]
//                    [--metrics-listen 127.0.0.1:7601] [flags]
//
// Prints `listening on HOST:PORT` on stdout once it serves (port 0 picks a
// free port), logs key=value lines on stderr, and drains then stops on
// SIGTERM or SIGINT. Flags, --help, --version and exit codes follow
// pipeplan/cmdline (docs/cli.md).
#include <signal.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/flag_set.h"
#include "pipeplan/common/host_port.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/server/base/release_memory.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/rpc/server.h"

namespace {

using pipeplan::common::ParsedFlags;

// What the planner serves, where it keeps state, and its replan policy.
void AddServiceFlags(pipeplan::common::FlagSet* f) {
  f->Value("listen", "ADDR", "gRPC address (127.0.0.1:7600; port 0 picks one)")
      .Value("data-dir", "DIR",
             "SQLite state directory ($XDG_STATE_HOME/pipeplan or\n~/.local/state/pipeplan)")
      .Value("store", "URL",
             "postgres://USER@HOST/DB (or postgresql://...): state in PostgreSQL,\n"
             "shared by replicated planners; default: SQLite in --data-dir")
      .Value("metrics-listen", "ADDR", "Prometheus endpoint (127.0.0.1:7601; \"off\" disables)")
      .Value("tls-cert", "FILE", "PEM server certificate (enables TLS; needs --tls-key)")
      .Value("tls-key", "FILE", "PEM private key")
      .Value("tls-client-ca", "FILE", "PEM CA; clients must present a certificate it signed")
      .Value("auth-token-file", "FILE", "require \"authorization: Bearer <first line of FILE>\"")
      .Value("solver-threads", "N", "solver pool size (0: one per core, at least 2)")
      .Value("lease-seconds", "S", "worker lease (10)")
      .Value("job-lease-seconds", "S",
             "replicated planners: a job owner's lease; another replica takes\n"
             "the job within about this long after its owner dies (10)")
      .Value("advertise-address", "HOST:PORT",
             "replicated planners: where others reach this one (the listen address)")
      .Value("cache-ttl-seconds", "S",
             "how long identical Plan requests are answered from cache (60)")
      .Value("drain-seconds", "S", "NOT_SERVING period before stopping on SIGTERM (1)")
      .Value("replan", "on|off|membership",
             "recalibrate from step reports and replan (on); membership:\n"
             "replan only when a worker is lost or joins")
      .Value("replan-min-gain", "X",
             "publish a calibrated plan only if its predicted step time is\n"
             "more than X (relative) better (0.05)")
      .Value("replan-min-interval-seconds", "S",
             "least time between calibration replans of a job (30)")
      .Value("replan-min-steps", "N", "reports per device of a version before calibrating (5)")
      .Value("replan-warmup-steps", "N", "first steps of each worker ignored (1)")
      .Value("replan-min-gain-seconds", "S",
             "and only if it is more than S seconds per step better (0.002)")
      .Value("replan-horizon-steps", "N",
             "and only if the gain over N steps pays for the measured switch (1000)")
      .Value("replan-switch-seconds", "S", "switch cost assumed before one was measured (1)")
      .Value("replan-noise-factor", "X",
             "and (calibration) only if the gain is above X times the\n"
             "measured step noise, (p90 - p50) / p50 (1; 0: off)")
      .Value("contingency-plans", "N",
             "plan ahead what the loss of each device (and host) of a running\n"
             "version would publish, at most N plans per version, sent to the\n"
             "workers to compile ahead (16; 0: off)")
      .Switch("version", "print the version and exit");
}

// The limits (docs/operations.md, "Limits").
void AddLimitFlags(pipeplan::common::FlagSet* f) {
  f->Section("limits (RESOURCE_EXHAUSTED past them; docs/operations.md, \"Limits\")")
      .Value("max-message-bytes", "N", "largest gRPC message (67108864)")
      .Value("grpc-memory-bytes", "N",
             "memory gRPC may hold for connections and calls\n(134217728; 0: unlimited)")
      .Value("grpc-max-threads", "N", "threads of gRPC's synchronous services (64; 0: unlimited)")
      .Value("max-nodes", "N", "largest graph accepted (2000000)")
      .Value("max-edges", "N", "(8000000)")
      .Value("max-devices", "N", "largest cluster accepted (4096)")
      .Value("max-concurrent-solves", "N", "solves queued + running (256)")
      .Value("solve-memory-bytes", "N",
             "estimated peak memory of all admitted solves\n(4294967296; 0: unlimited)")
      .Value("cache-max-bytes", "N", "plan cache: request bytes + plans (268435456)")
      .Value("cache-max-entries", "N", "plan cache entries (256)")
      .Value("max-jobs", "N", "jobs held (10000)")
      .Value("max-workers-per-job", "N", "(4096)")
      .Value("rendezvous-max-value-bytes", "N", "one rendezvous value (262144)")
      .Value("rendezvous-max-keys-per-job", "N", "(65536)")
      .Value("rendezvous-max-bytes-per-job", "N", "keys + values of one job (67108864)")
      .Value("rendezvous-max-bytes", "N", "keys + values of all jobs (536870912)")
      .Value("max-report-bytes", "N", "one step report, serialized (262144)")
      .Value("max-report-timings", "N", "timings in one step report (16384)")
      .Value("report-retention", "N", "step reports kept per job (10000)")
      .Value("report-retention-seconds", "S", "and none older than S (0: no age limit)")
      .Value("job-gauge-seconds", "S",
             "refresh running jobs' pipeplan_job_* gauges every S (5; 0: on GetJob only)");
}

const pipeplan::common::FlagSet& PlannerFlags() {
  static const pipeplan::common::FlagSet* flags = [] {
    auto* f = new pipeplan::common::FlagSet("pipeplan-planner");
    AddServiceFlags(f);
    AddLimitFlags(f);
    return f;
  }();
  return *flags;
}

// The "limits" section of PlannerFlags.
absl::Status ReadLimits(const ParsedFlags& f, pipeplan::server::ServerConfig* c) {
  pipeplan::server::HandlerOptions& h = c->handlers;
  pipeplan::server::JobRegistry::Options& r = h.registry;
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-message-bytes", 0, &c->max_message_bytes));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("grpc-memory-bytes", 0, &c->grpc_memory_bytes));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("grpc-max-threads", 0, &c->grpc_max_threads));
  if (c->grpc_memory_bytes > 0 && c->grpc_memory_bytes < 2 * int64_t{c->max_message_bytes}) {
    // Below that, gRPC would cancel a single largest message while it arrives.
    return pipeplan::common::UsageError(absl::StrCat("--grpc-memory-bytes=", c->grpc_memory_bytes,
                                                     " must be 0 or at least twice ",
                                                     "--max-message-bytes=", c->max_message_bytes));
  }
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-nodes", 0, &h.limits.max_nodes));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-edges", 0, &h.limits.max_edges));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-devices", 0, &h.max_cluster_devices));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-concurrent-solves", 0, &h.max_concurrent_solves));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("solve-memory-bytes", 0, &h.solve_memory_bytes));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("cache-max-bytes", 0, &h.cache.max_bytes));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("cache-max-entries", 0, &h.cache.max_entries));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-jobs", 0, &r.max_jobs));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-workers-per-job", 0, &r.max_workers_per_job));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadInteger("rendezvous-max-value-bytes", 0, &r.rendezvous_max_value_bytes));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadInteger("rendezvous-max-keys-per-job", 0, &r.rendezvous_max_keys_per_job));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadInteger("rendezvous-max-bytes-per-job", 0, &r.rendezvous_max_bytes_per_job));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("rendezvous-max-bytes", 0, &r.rendezvous_max_bytes));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-report-bytes", 0, &r.max_report_bytes));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-report-timings", 0, &r.max_report_timings));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("report-retention", 0, &c->report_retention));
  return f.ReadSeconds("report-retention-seconds", /*allow_zero=*/true, &c->report_max_age);
}

absl::Status ReadFlags(const ParsedFlags& f, pipeplan::server::ServerConfig* c, double* drain) {
  if (!f.positionals().empty()) {
    return pipeplan::common::UsageError(
        absl::StrCat("unexpected argument \"", f.positionals()[0], "\""));
  }
  c->listen = f.Get("listen").value_or(c->listen);
  c->data_dir = f.Get("data-dir").value_or(c->data_dir);
  c->store = f.Get("store").value_or(c->store);
  c->metrics_listen = f.Get("metrics-listen").value_or(c->metrics_listen);
  if (c->metrics_listen == "off") c->metrics_listen.clear();
  PIPEPLAN_RETURN_IF_ERROR(pipeplan::common::CheckHostPort("listen", c->listen));
  if (!c->metrics_listen.empty()) {
    PIPEPLAN_RETURN_IF_ERROR(pipeplan::common::CheckHostPort("metrics-listen", c->metrics_listen));
  }
  c->tls_cert_file = f.Get("tls-cert").value_or("");
  c->tls_key_file = f.Get("tls-key").value_or("");
  c->tls_client_ca_file = f.Get("tls-client-ca").value_or("");
  c->auth_token_file = f.Get("auth-token-file").value_or("");
  pipeplan::server::HandlerOptions& h = c->handlers;
  PIPEPLAN_RETURN_IF_ERROR(ReadLimits(f, c));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("solver-threads", 0, &h.solver_threads));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadSeconds("lease-seconds", /*allow_zero=*/true, &h.registry.lease));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadSeconds("job-gauge-seconds", /*allow_zero=*/true, &c->job_gauge_period));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadSeconds("job-lease-seconds", /*allow_zero=*/true, &c->job_lease));
  c->advertise_address = f.Get("advertise-address").value_or("");
  PIPEPLAN_RETURN_IF_ERROR(f.ReadSeconds("cache-ttl-seconds", /*allow_zero=*/true, &h.cache.ttl));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadNumber("drain-seconds", /*allow_zero=*/true, drain));
  PIPEPLAN_ASSIGN_OR_RETURN(std::string replan,
                            f.GetChoice("replan", {"on", "off", "membership"}, "on"));
  h.replan.enabled = replan != "off";
  h.replan.calibrate = replan == "on";
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadNumber("replan-min-gain", /*allow_zero=*/true, &h.replan.min_gain));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadSeconds("replan-min-interval-seconds", /*allow_zero=*/true, &h.replan.min_interval));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("replan-min-steps", 0, &h.replan.min_steps));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("replan-warmup-steps", 0, &h.replan.warmup_steps));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadNumber("replan-min-gain-seconds", /*allow_zero=*/true, &h.replan.min_gain_seconds));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("replan-horizon-steps", 0, &h.replan.horizon_steps));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadNumber("replan-switch-seconds", /*allow_zero=*/true, &h.replan.assumed_switch_seconds));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadNumber("replan-noise-factor", /*allow_zero=*/true, &h.replan.noise_factor));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("contingency-plans", 0, &h.replan.max_contingencies));
  return absl::OkStatus();
}

int Serve(const pipeplan::server::ServerConfig& config, double drain_seconds) {
  // Before any thread: large blocks (rendezvous values, a big solve's
  // arrays, big messages) go back to the OS when freed.
  pipeplan::server::KeepLargeAllocationsMapped();

  // Every thread inherits this mask; the main thread takes the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = pipeplan::server::PlannerServer::Start(config);
  if (!server.ok()) {
    std::cerr << "pipeplan-planner: " << absl::StatusCodeToString(server.status().code()) << ": "
              << server.status().message() << "\n";
    return pipeplan::common::ExitCodeFor(server.status());
  }
  std::cout << "listening on " << (*server)->host() << ":" << (*server)->port() << "\n";
  if ((*server)->metrics_port() > 0) {
    std::cout << "metrics on " << (*server)->metrics_address() << "\n";
  }
  std::cout.flush();

  int sig = 0;
  sigwait(&signals, &sig);
  pipeplan::server::LogInfo("signal", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"},
                                       {"drain_seconds", absl::StrCat(drain_seconds)}});
  (*server)->Drain();
  absl::SleepFor(absl::Seconds(drain_seconds));
  (*server)->Shutdown(absl::Seconds(5));
  server->reset();
  return pipeplan::common::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  std::optional<ParsedFlags> parsed = pipeplan::common::ParseMainFlags(
      PlannerFlags(), "[flags]", {argv + 1, argv + argc}, &exit_code);
  if (!parsed) return exit_code;
  pipeplan::server::ServerConfig config;
  double drain_seconds = 1;
  if (absl::Status s = ReadFlags(*parsed, &config, &drain_seconds); !s.ok()) {
    return pipeplan::common::UsageFailure(PlannerFlags().program(), s.message());
  }
  return Serve(config, drain_seconds);
}
