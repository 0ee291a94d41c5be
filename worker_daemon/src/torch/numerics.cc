#include "numerics.h"

#include <ATen/Context.h>
#include <stdlib.h>

namespace pipeplan::worker {

void SetTorchNumerics(const c10::Device& device, bool deterministic) {
  at::Context& context = at::globalContext();
  if (deterministic) {
    // ":4096:8" is the workspace NVIDIA documents for reproducible cuBLAS.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    // warn_only: an operator without a deterministic kernel warns rather
    // than failing the step; the run is then reproducible up to it.
    context.setDeterministicAlgorithms(true, /*warn_only=*/true);
  }
  if (!device.is_cuda()) return;
    // Newer LibTorch releases deprecate these in favour of per-backend
    // precision names; the old calls still work in every release we build on.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  context.setAllowTF32CuBLAS(false);
  context.setAllowTF32CuDNN(false);
#pragma GCC diagnostic pop
}

}  // namespace pipeplan::worker
