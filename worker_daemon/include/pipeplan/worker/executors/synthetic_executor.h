// An Executor that does no math: each compute action busy-waits for the
// stage's time modelled from the request's cluster (the plan's prediction
// divided by the plan's calibration factor) times `slowdown` times
// `time_scale`, and SEND/RECV
// buffers have the byte size of the tensors that cross the boundary (capped).
// With data-parallel replicas, EndStep all-reduces (ring, over the rank's
// replica group) a real buffer of the rank's gradient bytes (capped), so the
// step's time carries the all-reduce's cost too.
// It reproduces a plan's timing shape on CPU-only machines.
#ifndef PIPEPLAN_WORKER_SYNTHETIC_EXECUTOR_H_
#define PIPEPLAN_WORKER_SYNTHETIC_EXECUTOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "pipeplan/worker/runtime/executor.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct SyntheticOptions {
  // Per stage, seconds per microbatch.
  std::vector<double> forward_seconds;
  std::vector<double> backward_seconds;
  // Per boundary; missing entries mean `default_message_bytes`.
  std::vector<double> boundary_bytes;
  double default_message_bytes = 4096;
  double time_scale = 1.0;
  // Per stage, the plan's calibration factor (StagePlan::time_factor); the
  // executor divides the predicted times by it, so it always emulates the
  // request's cluster, never a calibration of it. Missing entries mean 1.
  std::vector<double> time_factor;
  // This device's true speed relative to the request's cluster: 2 makes
  // every compute action take twice the modelled time (a straggler).
  double slowdown = 1.0;
  // Step-to-step noise: every step, this rank's compute takes a factor drawn
  // uniformly from [1 - noise, 1 + noise] (seeded by `noise_seed` and the
  // step, so a rerun draws the same). 0: none.
  double noise = 0;
  uint64_t noise_seed = 0;
  // Messages are capped at this size (and are at least 1 byte).
  size_t max_message_bytes = size_t{64} << 20;
  // Share of a full backward that W takes (I takes the rest).
  double weight_fraction = 0.5;
  // This rank's replica group (null or size 1: no all-reduce) and the bytes
  // of the gradients of the stages it holds (capped at max_message_bytes).
  Transport* replica_group = nullptr;
  double gradient_bytes = 0;
  absl::Duration comm_timeout = absl::Seconds(60);
};

class SyntheticExecutor final : public Executor {
 public:
  explicit SyntheticExecutor(SyntheticOptions options) : options_(std::move(options)) {}

  absl::Status BeginStep(int64_t step) override;
  absl::Status Compute(const schedule::Action& action) override;
  absl::StatusOr<std::span<const std::byte>> SendBuffer(const schedule::Action& send) override;
  absl::StatusOr<std::span<std::byte>> RecvBuffer(const schedule::Action& recv) override;
  absl::Status EndStep() override;
  double PeakMemoryBytes() const override { return peak_bytes_; }

  // Seconds a compute action busy-waits.
  double ComputeSeconds(const schedule::Action& action) const;

 private:
  std::span<std::byte> Buffer(const schedule::Action& a, int boundary);
  size_t MessageBytes(int boundary) const;

  SyntheticOptions options_;
  int64_t step_ = 0;
  double step_factor_ = 1.0;      // this step's noise draw
  std::vector<float> gradients_;  // the all-reduce's buffer, kept across steps
  std::map<std::tuple<int, int, int>, std::vector<std::byte>> buffers_;  // (type, stage, mb)
  std::set<std::tuple<int, int, int>> live_;  // buffers the current step uses
  double held_bytes_ = 0;
  double peak_bytes_ = 0;
};

// Waits `seconds` as an accelerator would, leaving the CPU to other threads:
// sleeps, then busy-waits only the last 0.3 ms for precision.
void SpinFor(double seconds);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SYNTHETIC_EXECUTOR_H_
