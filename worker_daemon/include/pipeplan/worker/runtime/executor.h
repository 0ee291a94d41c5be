// The compute side of a pipeline stage.
//
// The stage runtime calls an Executor for every compute action of its rank
// (F, I, W, B; an OVERLAP_F_B arrives as its forward half then its backward
// half) and asks it for the buffers that SEND actions ship and RECV actions
// fill. Buffers are keyed by the action's (type, stage, microbatch) and stay
// valid and at a fixed address from the call until EndStep.
//
//   SendBuffer(SEND_F s, m): stage s's output for microbatch m.
//   SendBuffer(SEND_B s, m): the gradient w.r.t. stage s's input.
//   RecvBuffer(RECV_F s, m): stage s's input (from stage s - 1).
//   RecvBuffer(RECV_B s, m): the gradient w.r.t. stage s's output (from s + 1).
//
// The runtime guarantees a RECV has completed before the compute that needs
// it runs, and that a SEND's buffer is requested only after the compute that
// produces it ran.
#ifndef PIPEPLAN_WORKER_EXECUTOR_H_
#define PIPEPLAN_WORKER_EXECUTOR_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/action.h"

namespace pipeplan::worker {

class Executor {
 public:
  virtual ~Executor() = default;

  virtual absl::Status BeginStep(int64_t step) = 0;
  // action.type is F, I, W or B, on a stage of this rank.
  virtual absl::Status Compute(const schedule::Action& action) = 0;
  virtual absl::StatusOr<std::span<const std::byte>> SendBuffer(const schedule::Action& send) = 0;
  virtual absl::StatusOr<std::span<std::byte>> RecvBuffer(const schedule::Action& recv) = 0;
  // The transport is done with the buffer SendBuffer gave for `send` (the
  // runtime waited for it): the executor may free it before the step ends.
  virtual void SendDone(const schedule::Action& send) {}
  // Applies the step's accumulated gradients (if any) and frees the step's
  // buffers.
  virtual absl::Status EndStep() = 0;

  // Largest number of bytes held at once so far.
  virtual double PeakMemoryBytes() const = 0;
  // What PeakMemoryBytes measures: "cuda_allocator" (the CUDA caching
  // allocator's peak of allocated bytes), "cpu_allocator" (the tensor bytes
  // the executor's calls hold at LibTorch's CPU allocator) or "estimate"
  // (the executor's own count of the tensors it holds).
  virtual std::string PeakMemorySource() const { return "estimate"; }
  // The device time of the last Compute call when the executor measures it
  // itself: a GPU's kernels run after the call returns, so the host's clock
  // around the call would time only their launch. nullopt: the runtime's
  // wall clock around Compute is the time.
  virtual std::optional<double> LastComputeSeconds() const { return std::nullopt; }
  // The last completed step's loss, when this rank computes it.
  virtual std::optional<double> LastLoss() const { return std::nullopt; }
  // The seconds of the last EndStep spent waiting for the gradient
  // all-reduce over the replicas, past what the backward overlapped;
  // nullopt when the executor has no replicas or does not measure it.
  virtual std::optional<double> LastExposedAllReduceSeconds() const { return std::nullopt; }
  // CPU threads one Compute keeps busy: the planner models workers of one
  // machine sharing its cores (v1::CpuUse). 0 when computes run on an
  // accelerator or barely load the CPU.
  virtual int CpuComputeThreads() const { return 0; }
  // True when W (after a split I) runs the backward again to the
  // parameters, so it costs about a full B: the planner prices split
  // schedules with it (v1::ReportStepRequest.weight_pass_repeats_backward).
  virtual bool WeightPassRepeatsBackward() const { return false; }
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_EXECUTOR_H_
