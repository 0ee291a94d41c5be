// pipeplan-planner: the planning service.
//
//   pipeplan-planner [--listen 127.0.0.1:7600] [--data-dir DIR]
//                    [--metrics-listen 127.0.0.1:7601] [flags]
//
// Prints `listening on HOST:PORT` on stdout once it serves (port 0 picks a
// free port), logs key=value lines on stderr, and drains then stops on
// SIGTERM or SIGINT.
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pipeplan/server/log.h"
#include "pipeplan/server/server.h"

namespace {

constexpr char kUsage[] = R"(usage: pipeplan-planner [flags]

  --listen ADDR              gRPC address (127.0.0.1:7600; port 0 picks one)
  --data-dir DIR             SQLite state directory ($XDG_STATE_HOME/pipeplan or
                             ~/.local/state/pipeplan)
  --metrics-listen ADDR      Prometheus endpoint (127.0.0.1:7601; "off" disables)
  --tls-cert FILE            PEM server certificate (enables TLS; needs --tls-key)
  --tls-key FILE             PEM private key
  --tls-client-ca FILE       PEM CA; clients must present a certificate it signed
  --auth-token-file FILE     require "authorization: Bearer <first line of FILE>"
  --max-nodes N              largest graph accepted (2000000)
  --max-edges N              (8000000)
  --max-message-bytes N      largest gRPC message (67108864)
  --max-concurrent-solves N  solves queued + running before RESOURCE_EXHAUSTED (256)
  --solver-threads N         solver pool size (0: one per core, at least 2)
  --lease-seconds S          worker lease (10)
  --cache-ttl-seconds S      how long identical Plan requests are answered from cache (60)
  --drain-seconds S          NOT_SERVING period before stopping on SIGTERM (1)
  --replan on|off            recalibrate from step reports and replan (on)
  --replan-min-gain X        publish a calibrated plan only if its predicted step
                             time is more than X (relative) better (0.05)
  --replan-min-interval-seconds S
                             least time between calibration replans of a job (30)
  --replan-min-steps N       reports per device of a version before calibrating (5)
  --replan-warmup-steps N    first steps of each worker ignored (1)
)";

bool ParseFlags(int argc, char** argv, pipeplan::server::ServerConfig* c, double* drain) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (name == "--help" || name == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (name.rfind("--", 0) != 0) {
      std::cerr << "pipeplan-planner: unexpected argument \"" << name << "\"\n" << kUsage;
      return false;
    }
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      std::cerr << "pipeplan-planner: " << name << " needs a value\n";
      return false;
    }
    name = name.substr(2);
    auto num = [&](auto* out) {
      if (!absl::SimpleAtoi(value, out) || *out < 0) {
        std::cerr << "pipeplan-planner: --" << name << " wants a non-negative integer, got \""
                  << value << "\"\n";
        return false;
      }
      return true;
    };
    auto secs = [&](double* out) {
      if (!absl::SimpleAtod(value, out) || !(*out >= 0)) {
        std::cerr << "pipeplan-planner: --" << name << " wants seconds, got \"" << value << "\"\n";
        return false;
      }
      return true;
    };
    double d = 0;
    if (name == "listen") {
      c->listen = value;
    } else if (name == "data-dir") {
      c->data_dir = value;
    } else if (name == "metrics-listen") {
      c->metrics_listen = value == "off" ? "" : value;
    } else if (name == "tls-cert") {
      c->tls_cert_file = value;
    } else if (name == "tls-key") {
      c->tls_key_file = value;
    } else if (name == "tls-client-ca") {
      c->tls_client_ca_file = value;
    } else if (name == "auth-token-file") {
      c->auth_token_file = value;
    } else if (name == "max-nodes") {
      if (!num(&c->handlers.limits.max_nodes)) return false;
    } else if (name == "max-edges") {
      if (!num(&c->handlers.limits.max_edges)) return false;
    } else if (name == "max-message-bytes") {
      if (!num(&c->max_message_bytes)) return false;
    } else if (name == "max-concurrent-solves") {
      if (!num(&c->handlers.max_concurrent_solves)) return false;
    } else if (name == "solver-threads") {
      if (!num(&c->handlers.solver_threads)) return false;
    } else if (name == "lease-seconds") {
      if (!secs(&d)) return false;
      c->handlers.registry.lease = absl::Seconds(d);
    } else if (name == "cache-ttl-seconds") {
      if (!secs(&d)) return false;
      c->handlers.cache.ttl = absl::Seconds(d);
    } else if (name == "drain-seconds") {
      if (!secs(drain)) return false;
    } else if (name == "replan") {
      if (value != "on" && value != "off") {
        std::cerr << "pipeplan-planner: --replan wants on or off, got \"" << value << "\"\n";
        return false;
      }
      c->handlers.replan.enabled = value == "on";
    } else if (name == "replan-min-gain") {
      if (!secs(&c->handlers.replan.min_gain)) return false;
    } else if (name == "replan-min-interval-seconds") {
      if (!secs(&d)) return false;
      c->handlers.replan.min_interval = absl::Seconds(d);
    } else if (name == "replan-min-steps") {
      if (!num(&c->handlers.replan.min_steps)) return false;
    } else if (name == "replan-warmup-steps") {
      if (!num(&c->handlers.replan.warmup_steps)) return false;
    } else {
      std::cerr << "pipeplan-planner: unknown flag --" << name << "\n" << kUsage;
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  pipeplan::server::ServerConfig config;
  double drain_seconds = 1;
  if (!ParseFlags(argc, argv, &config, &drain_seconds)) return 2;

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
    return 1;
  }
  std::cout << "listening on " << (*server)->host() << ":" << (*server)->port() << "\n";
  if ((*server)->metrics_port() > 0) {
    std::cout << "metrics on " << (*server)->host() << ":" << (*server)->metrics_port() << "\n";
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
  return 0;
}
