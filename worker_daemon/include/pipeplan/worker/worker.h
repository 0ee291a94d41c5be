// The worker daemon's control loop (`pipeplan-worker`).
//
//   register -> watch the plan -> [agree on a version -> rendezvous ->
//   build the rank's runtime] -> run steps, report each -> ...
//
// * RegisterWorker (retried while the planner is UNAVAILABLE) gives the rank.
// * A watch thread keeps a WatchPlan stream open and reconnects with backoff
//   when it breaks (planner restart); it records the newest version seen.
// * A heartbeat thread renews the lease every lease/3.
// * At every step boundary the ranks take the maximum of the versions they
//   know (a tiny all-reduce over the current transport), so all of them
//   switch to plan N+1 at the same boundary. A ReportStep answered with
//   FAILED_PRECONDITION (stale version) or a newer current_plan_version feeds
//   the same agreement. A switch fetches the version (GetPlan: plan + graph),
//   runs a new rendezvous round keyed by the version and rebuilds runtime and
//   executor.
// * A worker whose device has no stage in a version waits for the next one.
#ifndef PIPEPLAN_WORKER_WORKER_H_
#define PIPEPLAN_WORKER_WORKER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/client/planner_client.h"

namespace pipeplan::worker {

struct WorkerOptions {
  client::ClientOptions planner;
  std::string job_id;
  std::string worker_id;
  std::string device_id;
  std::string transport = "gloo";      // gloo | nccl
  std::string executor = "synthetic";  // synthetic | mlp
  // Steps to run before exiting 0; 0 runs until stopped.
  int64_t steps = 0;
  std::string listen_host = "127.0.0.1";
  double time_scale = 1.0;
  // Synthetic executor: this device runs `slowdown` times the modelled time
  // (emulates a straggler; the planner's calibration should notice).
  double slowdown = 1.0;
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
};

class WorkerMetrics;

class Worker {
 public:
  static absl::StatusOr<std::unique_ptr<Worker>> Create(WorkerOptions options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs until `steps` steps are done (OK), Stop() was called (OK), the job
  // was deleted (NOT_FOUND) or an unrecoverable error.
  absl::Status Run();
  // Asks Run to return after the current step; the other ranks stop at the
  // same step boundary (the stop is voted on with the plan version).
  // Async-signal-safe.
  void Stop() { stop_.store(true); }

  // "HOST:PORT" of the metrics endpoint, empty when off.
  std::string metrics_address() const;

 private:
  struct State;
  explicit Worker(WorkerOptions options);

  WorkerOptions options_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<client::PlannerClient> client_;
  std::unique_ptr<WorkerMetrics> metrics_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_WORKER_H_
