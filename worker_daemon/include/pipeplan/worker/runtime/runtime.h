// The stage runtime: executes one rank's lowered action list for a step.
//
// It knows actions, a Transport and an Executor, never where the plan came
// from. Semantics follow the simulator (docs/schedules.md): SEND and RECV
// are posted when the rank reaches them and never block it; a compute action
// first waits for the RECV that feeds it; at the end of the step every posted
// op is waited for. So every schedule the simulator accepts runs without
// deadlock.
//
// Timings: a compute action's time (the executor's device time when it
// measures one, e.g. CUDA events; else wall time); EndStep's wall time; a SEND's posting time plus
// its final wait at the end of the step; a RECV's posting time plus the time the rank blocked on
// it. SEND/RECV also carry their wall-clock post and completion times (system clock), so the
// planner can pair the two ends of a transfer across processes and time the link itself.
#ifndef PIPEPLAN_WORKER_RUNTIME_H_
#define PIPEPLAN_WORKER_RUNTIME_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/core/schedule/action.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/worker/runtime/executor.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct ActionTime {
  schedule::Action action;
  double seconds = 0;
  // When the rank reached the action, seconds after the step's start.
  double start_seconds = 0;
  // SEND/RECV only: message size, the rank on the other end, the wall clock
  // (microseconds since the Unix epoch) when posted and when its wait
  // returned, and the seconds the rank blocked in that wait.
  double bytes = 0;
  int peer_rank = -1;
  int64_t post_unix_us = 0;
  int64_t complete_unix_us = 0;
  double wait_seconds = 0;
};

struct StepResult {
  int64_t step = 0;
  int rank = 0;
  double step_seconds = 0;
  // Wall clock at the step's start (microseconds since the Unix epoch).
  int64_t start_unix_us = 0;
  // Sum of compute actions' seconds, and of the time blocked on SEND/RECV.
  double compute_seconds = 0;
  double comm_seconds = 0;
  // The executor's EndStep: gradient reductions over replicas and tied
  // parameters, clipping and the optimizer step.
  double optimizer_seconds = 0;
  // In program order, one per action.
  std::vector<ActionTime> timings;
};

struct RuntimeOptions {
  int rank = 0;
  int num_stages = 0;
  int num_microbatches = 0;
  std::vector<int> stage_to_rank;
  // Longest a single wait on a transport op may take.
  absl::Duration comm_timeout = absl::Seconds(60);
};

class StageRuntime {
 public:
  // INVALID_ARGUMENT when the program names a stage not on `options.rank`,
  // a microbatch out of range or a hop without a peer stage.
  static absl::StatusOr<StageRuntime> Create(RuntimeOptions options, schedule::RankProgram program);
  // The runtime of `rank` in `lowered` (InsertSendRecv's output), its
  // options taken from the schedule. INVALID_ARGUMENT for a rank the schedule
  // does not have, else as Create.
  static absl::StatusOr<StageRuntime> ForRank(const schedule::PipelineSchedule& lowered, int rank,
                                              absl::Duration comm_timeout);

  // Runs one step. On error the step is abandoned (the executor's EndStep is
  // not called) and the transport should be rebuilt.
  absl::StatusOr<StepResult> RunStep(int64_t step, Transport& transport, Executor& executor) const;

  const RuntimeOptions& options() const { return options_; }
  const std::vector<schedule::Action>& actions() const { return actions_; }

  // The tag a SEND/RECV of (direction, boundary, microbatch) uses; boundary b
  // is between stages b and b + 1.
  static uint64_t Tag(bool backward, int boundary, int microbatch, int num_microbatches);
  // The rank on the other end of a SEND/RECV.
  int PeerOf(const schedule::Action& a) const;

 private:
  StageRuntime(RuntimeOptions options, std::vector<schedule::Action> actions)
      : options_(std::move(options)), actions_(std::move(actions)) {}
  RuntimeOptions options_;
  std::vector<schedule::Action> actions_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_RUNTIME_H_
