// Measurements that depend on the executor's device: how long a compute
// action ran, and the most memory the step's tensors held. On a CUDA device
// the work is asynchronous, so the host's clock around a call measures only
// the launch: CUDA events bracket the action instead, and the CUDA caching
// allocator's peak (torch.cuda.max_memory_allocated) is the memory. On the
// CPU the wall clock is the time and the executor's own estimate the memory.
//
// The CUDA parts are compiled only against a CUDA LibTorch
// (PIPEPLAN_TORCH_CUDA); with a CPU-only LibTorch there is no CUDA device to
// ask about. Private to pipeplan_torch_executor (includes LibTorch).
#ifndef PIPEPLAN_WORKER_SRC_TORCH_DEVICE_STATS_H_
#define PIPEPLAN_WORKER_SRC_TORCH_DEVICE_STATS_H_

#include <c10/core/Device.h>

#include <chrono>
#include <memory>
#include <optional>

namespace pipeplan::worker {

// Times one action at a time on `device`. Start, then Stop after the
// action's calls: Stop returns its seconds (on CUDA it waits for the action's
// kernels to finish, so the transfers that follow see finished tensors).
class ComputeTimer {
 public:
  explicit ComputeTimer(c10::Device device);
  ~ComputeTimer();
  ComputeTimer(const ComputeTimer&) = delete;
  ComputeTimer& operator=(const ComputeTimer&) = delete;
  void Start();
  double Stop();

 private:
  struct Events;  // CUDA events, on a CUDA device
  c10::Device device_;
  std::unique_ptr<Events> events_;
  std::chrono::steady_clock::time_point start_;
};

// The CUDA caching allocator's peak of allocated bytes on `device` since the
// last ResetPeakMemory; nullopt on the CPU.
std::optional<double> AllocatorPeakBytes(c10::Device device);
void ResetPeakMemory(c10::Device device);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_TORCH_DEVICE_STATS_H_
