// Everything a worker daemon is configured with (`pipeplan-worker` flags,
// docs/worker.md). Worker::Create checks it; the executor factory reads the
// executor's part.
#ifndef PIPEPLAN_WORKER_WORKER_OPTIONS_H_
#define PIPEPLAN_WORKER_WORKER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "pipeplan/client/planner_client.h"

// Where pipeplan_stage_compile.py is unless --stage-compiler says otherwise:
// the source tree's copy in a build tree (the build sets it), else the
// installed one.
#ifndef PIPEPLAN_DEFAULT_STAGE_COMPILER
#define PIPEPLAN_DEFAULT_STAGE_COMPILER "/usr/share/pipeplan/python/pipeplan_stage_compile.py"
#endif

namespace pipeplan::worker {

struct WorkerOptions {
  client::ClientOptions planner;
  std::string job_id;
  std::string worker_id;
  std::string device_id;
  std::string transport = "gloo";      // gloo | nccl
  std::string executor = "synthetic";  // synthetic | mlp | torch
  // Steps to run before exiting 0; 0 runs until stopped.
  int64_t steps = 0;
  std::string listen_host = "127.0.0.1";
  double time_scale = 1.0;
  // Synthetic executor: this device runs `slowdown` times the modelled time
  // (emulates a straggler; the planner's calibration should notice).
  double slowdown = 1.0;
  // Synthetic executor: each step's compute varies by up to this fraction
  // (uniform, seeded by the worker id): noise the replan policy must not
  // mistake for a straggler.
  double noise = 0;
  size_t max_message_bytes = size_t{64} << 20;
  double memory_bytes = 0;
  absl::Duration comm_timeout = absl::Seconds(60);
  // Registration and rendezvous give up after this.
  absl::Duration connect_timeout = absl::Seconds(60);
  // mlp executor.
  int mlp_width = 16;
  int mlp_rows = 8;
  float mlp_learning_rate = 1.0f;
  // "off" or HOST:PORT (port 0 picks one).
  std::string metrics_listen = "off";
  // torch executor: the interpreter and script that compile a plan's stages
  // (docs/model-package.md), and where compiled stages are cached.
  std::string python = PIPEPLAN_DEFAULT_PYTHON;
  std::string stage_compiler = PIPEPLAN_DEFAULT_STAGE_COMPILER;
  std::string stage_cache = "/tmp/pipeplan-stages";
  // --torch-device: the torch device this worker runs on ("cpu", "cuda:N"
  // or a local index "N"), overriding the cluster's Device.torch_device;
  // empty: the mapping's default (env/torch_device_map.h).
  std::string torch_device;
  // --deterministic: the torch executor uses deterministic algorithms (and
  // cuBLAS's fixed workspace), so a GPU run repeats bit for bit and matches
  // a reference trainer run the same way; slower on some operators.
  bool deterministic = false;
  // --snapshot-memory-limit-mb: host memory for in-memory peer snapshots
  // (this rank's own two and the two it holds for a peer;
  // docs/snapshots.md). A round that would pass it is skipped.
  size_t snapshot_memory_limit_bytes = size_t{8192} * 1000 * 1000;
  // --allreduce-probe-bytes: the all-reduce the ranks of a replica time at
  // each plan switch (transport/allreduce_probe.h) when they train on the
  // host over Gloo; 0: none. A collective: the same on every worker of a
  // job.
  int64_t allreduce_probe_bytes = int64_t{4} << 20;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_WORKER_OPTIONS_H_
