// CUDA events and the caching allocator's statistics behind a device check
// (device_stats.h). With a CPU-only LibTorch (PIPEPLAN_TORCH_CUDA unset) only
// the CPU branches exist: no device of that build is a CUDA device.
#include "device_stats.h"

#include <torch/cuda.h>

#include "pipeplan/worker/torch/torch_devices.h"

#ifdef PIPEPLAN_TORCH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace pipeplan::worker {

int TorchCudaDeviceCount() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

#ifdef PIPEPLAN_TORCH_CUDA
struct ComputeTimer::Events {
  // Timing events (the default flags disable timing).
  at::cuda::CUDAEvent start{cudaEventDefault};
  at::cuda::CUDAEvent stop{cudaEventDefault};
};
#else
struct ComputeTimer::Events {};
#endif

ComputeTimer::ComputeTimer(c10::Device device) : device_(device) {
#ifdef PIPEPLAN_TORCH_CUDA
  if (device_.is_cuda()) events_ = std::make_unique<Events>();
#endif
}

ComputeTimer::~ComputeTimer() = default;

void ComputeTimer::Start() {
#ifdef PIPEPLAN_TORCH_CUDA
  if (events_) {
    events_->start.record(at::cuda::getCurrentCUDAStream(device_.index()));
    return;
  }
#endif
  start_ = std::chrono::steady_clock::now();
}

double ComputeTimer::Stop() {
#ifdef PIPEPLAN_TORCH_CUDA
  if (events_) {
    events_->stop.record(at::cuda::getCurrentCUDAStream(device_.index()));
    events_->stop.synchronize();
    return events_->start.elapsed_time(events_->stop) / 1000.0;  // milliseconds
  }
#endif
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

#ifdef PIPEPLAN_TORCH_CUDA
namespace {
// The caching allocator's statistics throw ("Invalid device argument ...:
// did you call init?") until CUDA is lazily initialised, which the first
// CUDA tensor does; an executor resets the peak before it has made one.
void InitCuda(c10::Device device) { (void)at::empty({0}, at::TensorOptions().device(device)); }
}  // namespace
#endif

std::optional<double> AllocatorPeakBytes(c10::Device device) {
#ifdef PIPEPLAN_TORCH_CUDA
  if (device.is_cuda()) {
    // No InitCuda on this per-step read: every executor resets the peak
    // (ResetPeakMemory, which initialises CUDA) before it asks for it.
    // Index 0 is the aggregate over pool kinds in every LibTorch release;
    // the enum naming it moved between namespaces.
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<double>(stats.allocated_bytes[0].peak);
  }
#endif
  (void)device;
  return std::nullopt;
}

void ResetPeakMemory(c10::Device device) {
#ifdef PIPEPLAN_TORCH_CUDA
  if (device.is_cuda()) {
    InitCuda(device);
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }
#endif
  (void)device;
}

}  // namespace pipeplan::worker
