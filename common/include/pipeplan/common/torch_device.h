// The one reader of a torch device name ("cpu", "cuda:N", or a bare local
// CUDA index "N"), as a cluster's Device.torch_device and the worker's
// --torch-device give it. Torch-free, so the planner's request checks and the
// worker's device mapping read names the same way.
#ifndef PIPEPLAN_COMMON_TORCH_DEVICE_H_
#define PIPEPLAN_COMMON_TORCH_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pipeplan::common {

struct TorchDeviceName {
  bool cuda = false;
  int index = 0;  // CUDA ordinal on the host; 0 for cpu
  // "cpu" or "cuda:N" (a bare "N" and "cuda" read as cuda:N and cuda:0).
  std::string ToString() const;
};

// INVALID_ARGUMENT quoting `name` when it is none of "cpu", "cuda",
// "cuda:N" or "N" (N a non-negative integer).
absl::StatusOr<TorchDeviceName> ParseTorchDevice(absl::string_view name);

}  // namespace pipeplan::common

#endif  // PIPEPLAN_COMMON_TORCH_DEVICE_H_
