// pipeplan-worker: one per GPU (or per CPU rank). See docs/worker.md.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/worker/worker.h"

namespace {

pipeplan::worker::Worker* g_worker = nullptr;

void OnSignal(int) {
  if (g_worker) g_worker->Stop();
}

constexpr char kUsage[] =
    "usage: pipeplan-worker --planner ADDR --job JOB --worker-id ID --device DEVICE_ID\n"
    "  [--transport gloo|nccl] [--executor synthetic|mlp|torch] [--steps N]\n"
    "  [--listen-host 127.0.0.1] [--time-scale X] [--slowdown X] [--max-message-bytes N]\n"
    "  [--memory-bytes N] [--comm-timeout-seconds S] [--connect-timeout-seconds S]\n"
    "  [--mlp-width N] [--mlp-rows N] [--mlp-learning-rate X]\n"
    "  [--metrics-listen HOST:PORT|off] [--token-file F] [--tls-ca F]\n"
    "  [--tls-cert F --tls-key F] [--rpc-timeout-seconds S]\n"
    "  [--python /usr/bin/python3] [--stage-compiler PATH] [--stage-cache DIR]\n";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "pipeplan-worker: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  pipeplan::worker::WorkerOptions o;
  o.planner.timeout = absl::Seconds(10);
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return Fail(absl::StrCat(flag, " needs a value"));
    const std::string value = argv[++i];
    auto num = [&](double* out) { return absl::SimpleAtod(value, out); };
    double d = 0;
    bool ok = true;
    if (flag == "--planner")
      o.planner.address = value;
    else if (flag == "--job")
      o.job_id = value;
    else if (flag == "--worker-id")
      o.worker_id = value;
    else if (flag == "--device")
      o.device_id = value;
    else if (flag == "--transport")
      o.transport = value;
    else if (flag == "--executor")
      o.executor = value;
    else if (flag == "--python")
      o.python = value;
    else if (flag == "--stage-compiler")
      o.stage_compiler = value;
    else if (flag == "--stage-cache")
      o.stage_cache = value;
    else if (flag == "--listen-host")
      o.listen_host = value;
    else if (flag == "--metrics-listen")
      o.metrics_listen = value;
    else if (flag == "--token-file")
      o.planner.token_file = value;
    else if (flag == "--tls-ca")
      o.planner.tls_ca_file = value;
    else if (flag == "--tls-cert")
      o.planner.tls_cert_file = value;
    else if (flag == "--tls-key")
      o.planner.tls_key_file = value;
    else if (flag == "--steps")
      ok = absl::SimpleAtoi(value, &o.steps) && o.steps >= 0;
    else if (flag == "--time-scale")
      ok = num(&o.time_scale) && o.time_scale >= 0;
    else if (flag == "--slowdown")
      ok = num(&o.slowdown) && o.slowdown > 0;
    else if (flag == "--max-message-bytes")
      ok = num(&d) && d >= 1, o.max_message_bytes = static_cast<size_t>(d);
    else if (flag == "--memory-bytes")
      ok = num(&o.memory_bytes);
    else if (flag == "--comm-timeout-seconds")
      ok = num(&d) && d > 0, o.comm_timeout = absl::Seconds(d);
    else if (flag == "--connect-timeout-seconds")
      ok = num(&d) && d > 0, o.connect_timeout = absl::Seconds(d);
    else if (flag == "--rpc-timeout-seconds")
      ok = num(&d) && d > 0, o.planner.timeout = absl::Seconds(d);
    else if (flag == "--mlp-width")
      ok = absl::SimpleAtoi(value, &o.mlp_width) && o.mlp_width > 0;
    else if (flag == "--mlp-rows")
      ok = absl::SimpleAtoi(value, &o.mlp_rows) && o.mlp_rows > 0;
    else if (flag == "--mlp-learning-rate")
      ok = absl::SimpleAtof(value, &o.mlp_learning_rate);
    else
      return Fail(absl::StrCat("unknown flag ", flag));
    if (!ok) return Fail(absl::StrCat("bad value for ", flag, ": \"", value, "\""));
  }
  auto worker = pipeplan::worker::Worker::Create(o);
  if (!worker.ok()) return Fail(std::string(worker.status().ToString()));
  g_worker = worker->get();
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  if (!(*worker)->metrics_address().empty()) {
    std::printf("metrics on %s\n", (*worker)->metrics_address().c_str());
    std::fflush(stdout);
  }
  absl::Status s = (*worker)->Run();
  g_worker = nullptr;
  if (!s.ok()) {
    std::fprintf(stderr, "pipeplan-worker: %s\n",
                 std::string(s.ToString(absl::StatusToStringMode::kWithNoExtraData)).c_str());
    if (pipeplan::worker::IsJobFailure(s)) return 4;
    return s.code() == absl::StatusCode::kNotFound ? 3 : 1;
  }
  return 0;
}
