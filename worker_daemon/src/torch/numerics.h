// How the torch executor's arithmetic is set up for a device: float32 as
// true float32 on CUDA (no TF32), and optionally deterministic algorithms,
// so what runs is what the plan's cost model and the reference trainer
// (pipeplan_reference_train.py --device) assume.
#ifndef PIPEPLAN_WORKER_TORCH_NUMERICS_H_
#define PIPEPLAN_WORKER_TORCH_NUMERICS_H_

#include <c10/core/Device.h>

namespace pipeplan::worker {

// Torch's settings are per process, so this sets them for every executor of
// the process; all of a worker's executors share its flags. `deterministic`
// also fixes cuBLAS's workspace (CUBLAS_WORKSPACE_CONFIG, unless already set),
// which takes effect only before the process's first cuBLAS call.
void SetTorchNumerics(const c10::Device& device, bool deterministic);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_TORCH_NUMERICS_H_
