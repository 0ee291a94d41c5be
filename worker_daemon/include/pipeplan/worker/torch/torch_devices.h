// What LibTorch sees of this host's accelerators, for the worker's device
// mapping (env/torch_device_map.h). Torch-free, like torch_executor.h.
#ifndef PIPEPLAN_WORKER_TORCH_TORCH_DEVICES_H_
#define PIPEPLAN_WORKER_TORCH_TORCH_DEVICES_H_

namespace pipeplan::worker {

// CUDA devices LibTorch can use in this process: 0 with a CPU-only LibTorch
// or no GPU visible.
int TorchCudaDeviceCount();

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_TORCH_TORCH_DEVICES_H_
