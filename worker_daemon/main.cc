// pipeplan-worker: one per GPU (or per CPU rank). See docs/worker.md; flags,
// --help, --version and exit codes follow pipeplan/common (docs/cli.md):
// 0 done or stopped (left the job), 1 error, 2 bad flags or configuration, 3 the planner
// was unavailable, 4 the job was deleted or cancelled (do not restart),
// 128 + the signal on a second SIGTERM / SIGINT.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/flag_set.h"
#include "pipeplan/common/host_port.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/common/torch_device.h"
#include "pipeplan/worker/control/worker.h"
#include "pipeplan/worker/transport/nccl_transport.h"

#ifdef PIPEPLAN_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace {

using pipeplan::common::ParsedFlags;
using pipeplan::common::UsageError;

pipeplan::worker::Worker* g_worker = nullptr;
std::atomic<int> g_signals{0};  // lock-free: safe in a signal handler

// The first SIGTERM or SIGINT is a graceful leave at the next step boundary
// (docs/elastic.md); a second one, for an operator or supervisor who will
// not wait for it, exits at once with 128 + the signal (the peers recover as
// from a lost worker).
void OnSignal(int sig) {
  if (g_signals.fetch_add(1) > 0) {
    static const char kMessage[] = "pipeplan-worker: second signal, exiting now\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    std::_Exit(128 + sig);
  }
  if (g_worker) g_worker->Stop();
}

// An installed worker (<prefix>/bin) uses the stage compiler installed with
// the Python package (<prefix>/lib/python3/dist-packages); a build-tree
// worker keeps the compiled-in source path.
std::string DefaultStageCompiler(const std::string& built_in) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return built_in;
  const std::filesystem::path installed = exe.parent_path().parent_path() / "lib" / "python3" /
                                          "dist-packages" / "pipeplan_stage_compile.py";
  return std::filesystem::is_regular_file(installed, ec) ? installed.string() : built_in;
}

const pipeplan::common::FlagSet& WorkerFlags() {
  static const pipeplan::common::FlagSet* flags = [] {
    auto* f = new pipeplan::common::FlagSet("pipeplan-worker");
    f->Section("required")
        .Value("planner", "ADDR",
               "the pipeplan-planner (host:port), or replicas A,B,C: the next one\n"
               "when one dies")
        .Value("job", "JOB", "the job to join (`pipeplan jobs create` prints it)")
        .Value("worker-id", "ID", "this worker's name, unique in the job")
        .Value("device", "DEVICE_ID", "the device of the job's cluster it runs as");
    f->Section("flags")
        .Value("transport", "auto|gloo|nccl",
               "auto (default): nccl when built with NCCL and a GPU is visible,\n"
               "else gloo (CPU, TCP)")
        .Value("executor", "NAME", "synthetic (default), mlp or torch (trains the job's model)")
        .Value("steps", "N", "steps to run before exiting 0 (0: until stopped)")
        .Value("listen-host", "HOST", "address peers reach this worker on (127.0.0.1)")
        .Value("time-scale", "X", "synthetic executor: scale of the modelled times (1)")
        .Value("slowdown", "X", "synthetic executor: run X times slower (a straggler)")
        .Value("noise", "R", "synthetic executor: each step's compute varies by up to R (0)")
        .Value("max-message-bytes", "N", "largest gRPC message (67108864)")
        .Value("memory-bytes", "N", "device memory to report (0: the cluster spec's)")
        .Value("comm-timeout-seconds", "S", "a send or receive gives up after S (60)")
        .Value("connect-timeout-seconds", "S", "registration and rendezvous give up after S (60)")
        .Value("rpc-timeout-seconds", "S", "per planner call (10)")
        .Value("mlp-width", "N", "mlp executor: layer width (16)")
        .Value("mlp-rows", "N", "mlp executor: rows per microbatch (8)")
        .Value("mlp-learning-rate", "X", "mlp executor (1)")
        .Value("metrics-listen", "HOST:PORT", "Prometheus endpoint (off)");
    pipeplan::common::AddPlannerCredentialFlags(f);
    f->Value("python", "PATH",
             "torch executor: interpreter of the stage compiler\n"
             "(" PIPEPLAN_DEFAULT_PYTHON ")")
        .Value("stage-compiler", "PATH",
               absl::StrCat("torch executor: pipeplan_stage_compile.py\n(",
                            DefaultStageCompiler(PIPEPLAN_DEFAULT_STAGE_COMPILER), ")"))
        .Value("stage-cache", "DIR", "torch executor: compiled stages (/tmp/pipeplan-stages)")
        .Value("torch-device", "cpu|cuda:N|N",
               "torch executor: the device to run on, over the cluster's\n"
               "torch_device (default: cuda:<local index> with CUDA, else cpu)")
        .Switch("deterministic",
                "torch executor: deterministic algorithms (a GPU run repeats\n"
                "exactly; some operators are slower)")
        .Value("allreduce-probe-bytes", "N",
               "torch executor over gloo: the ring all-reduce a replica's ranks\n"
               "time at each plan switch, reported for the planner to price\n"
               "replicas' gradients (4194304; 0: off; the same on every worker)")
        .Value("snapshot-memory-limit-mb", "MB",
               "torch executor: host memory for in-memory peer snapshots (8192)")
        .Switch("version", "print the version and exit");
    return f;
  }();
  return *flags;
}

bool GpuVisible() {
#ifdef PIPEPLAN_HAVE_NCCL
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

// --transport auto: NCCL only where it can work, so a CPU-only host (or a
// build without NCCL) starts with Gloo instead of failing.
std::string ResolveTransport(const std::string& transport) {
  if (transport != "auto") return transport;
  const bool nccl = pipeplan::worker::NcclAvailable() && GpuVisible();
  std::cerr << "pipeplan-worker: --transport auto: " << (nccl ? "nccl" : "gloo")
            << (pipeplan::worker::NcclAvailable() ? (nccl ? "" : " (no GPU visible)")
                                                  : " (built without NCCL)")
            << "\n";
  return nccl ? "nccl" : "gloo";
}

absl::Status ReadFlags(const ParsedFlags& f, pipeplan::worker::WorkerOptions* o) {
  if (!f.positionals().empty()) {
    return UsageError(absl::StrCat("unexpected argument \"", f.positionals()[0], "\""));
  }
  o->planner.address = f.Get("planner").value_or(o->planner.address);
  if (f.Has("planner")) {
    PIPEPLAN_RETURN_IF_ERROR(pipeplan::common::CheckHostPortList("planner", o->planner.address));
  }
  o->job_id = f.Get("job").value_or("");
  o->worker_id = f.Get("worker-id").value_or("");
  o->device_id = f.Get("device").value_or("");
  o->executor = f.Get("executor").value_or(o->executor);
  o->listen_host = f.Get("listen-host").value_or(o->listen_host);
  o->metrics_listen = f.Get("metrics-listen").value_or(o->metrics_listen);
  o->python = f.Get("python").value_or(o->python);
  o->stage_compiler = f.Get("stage-compiler").value_or(DefaultStageCompiler(o->stage_compiler));
  o->stage_cache = f.Get("stage-cache").value_or(o->stage_cache);
  o->torch_device = f.Get("torch-device").value_or("");
  o->deterministic = f.Has("deterministic");
  if (!o->torch_device.empty()) {
    // The name is checked now (exit 2); whether this host has the device,
    // at the first plan (exit 1, FAILED_PRECONDITION naming it).
    if (absl::Status s = pipeplan::common::ParseTorchDevice(o->torch_device).status(); !s.ok()) {
      return UsageError(absl::StrCat("--torch-device: ", s.message()));
    }
  }
  o->planner.token_file = f.Get("token-file").value_or("");
  o->planner.tls_ca_file = f.Get("tls-ca").value_or("");
  o->planner.tls_cert_file = f.Get("tls-cert").value_or("");
  o->planner.tls_key_file = f.Get("tls-key").value_or("");
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("steps", 0, &o->steps));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadNumber("time-scale", /*allow_zero=*/true, &o->time_scale));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadNumber("slowdown", /*allow_zero=*/false, &o->slowdown));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadNumber("noise", /*allow_zero=*/true, &o->noise));
  if (o->noise >= 1) return UsageError("--noise must be below 1");
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("max-message-bytes", 1, &o->max_message_bytes));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadNumber("memory-bytes", /*allow_zero=*/true, &o->memory_bytes));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadSeconds("comm-timeout-seconds", /*allow_zero=*/false, &o->comm_timeout));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadSeconds("connect-timeout-seconds", /*allow_zero=*/false, &o->connect_timeout));
  PIPEPLAN_RETURN_IF_ERROR(
      f.ReadSeconds("rpc-timeout-seconds", /*allow_zero=*/false, &o->planner.timeout));
  int64_t snapshot_mb = static_cast<int64_t>(o->snapshot_memory_limit_bytes / 1000000);
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("snapshot-memory-limit-mb", 0, &snapshot_mb));
  o->snapshot_memory_limit_bytes = static_cast<size_t>(snapshot_mb) * 1000000;
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("allreduce-probe-bytes", 0, &o->allreduce_probe_bytes));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("mlp-width", 1, &o->mlp_width));
  PIPEPLAN_RETURN_IF_ERROR(f.ReadInteger("mlp-rows", 1, &o->mlp_rows));
  PIPEPLAN_ASSIGN_OR_RETURN(double lr, f.GetDouble("mlp-learning-rate", o->mlp_learning_rate));
  o->mlp_learning_rate = static_cast<float>(lr);
  PIPEPLAN_ASSIGN_OR_RETURN(std::string transport,
                            f.GetChoice("transport", {"auto", "gloo", "nccl"}, "auto"));
  o->transport = ResolveTransport(transport);
  return absl::OkStatus();
}

int UsageFailure(const absl::Status& status) {
  return pipeplan::common::UsageFailure(WorkerFlags().program(), status.message());
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  std::optional<ParsedFlags> parsed = pipeplan::common::ParseMainFlags(
      WorkerFlags(), "--planner ADDR --job JOB --worker-id ID --device DEVICE_ID [flags]",
      {argv + 1, argv + argc}, &exit_code);
  if (!parsed) return exit_code;
  pipeplan::worker::WorkerOptions o;
  o.planner.timeout = absl::Seconds(10);
  if (absl::Status s = ReadFlags(*parsed, &o); !s.ok()) return UsageFailure(s);
  // Create checks the options together (required flags, executor, files):
  // its errors are configuration errors too.
  auto worker = pipeplan::worker::Worker::Create(o);
  if (!worker.ok()) return UsageFailure(worker.status());
  g_worker = worker->get();
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  // A peer that exits while this worker sends to it (a snapshot, a
  // collective) is an EPIPE for the transport to report, not a signal that
  // kills the worker.
  std::signal(SIGPIPE, SIG_IGN);
  if (!(*worker)->metrics_address().empty()) {
    std::printf("metrics on %s\n", (*worker)->metrics_address().c_str());
    std::fflush(stdout);
  }
  absl::Status s = (*worker)->Run();
  g_worker = nullptr;
  if (!s.ok()) {
    std::fprintf(stderr, "pipeplan-worker: %s\n",
                 std::string(s.ToString(absl::StatusToStringMode::kWithNoExtraData)).c_str());
  }
  if (pipeplan::worker::IsJobFailure(s)) return pipeplan::common::kExitJobFailed;
  return pipeplan::common::ExitCodeFor(s);
}
