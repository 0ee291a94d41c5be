// Which torch device a worker's executor runs on: the plan's device id mapped
// to an accelerator of this host (docs/worker.md, "Devices"). Pure: the
// caller supplies what the cluster says and how many CUDA devices the host
// has, so the rule is tested without a GPU.
//
// Order: --torch-device, else the cluster device's torch_device ("cpu",
// "cuda:N" or a local index "N"), else cuda:<local index> when the host has
// CUDA devices, else cpu. The local index is the device's position among
// the cluster's devices on the same host, in the cluster's order.
#ifndef PIPEPLAN_WORKER_ENV_TORCH_DEVICE_MAP_H_
#define PIPEPLAN_WORKER_ENV_TORCH_DEVICE_MAP_H_

#include <string>

#include "absl/status/statusor.h"

namespace pipeplan::worker {

struct TorchDeviceInputs {
  std::string device_id;     // the plan's device, for messages
  std::string flag;          // --torch-device; empty: not given
  std::string cluster_name;  // Device.torch_device; empty: not given
  int local_index = 0;
  int cuda_devices = 0;  // CUDA devices visible to this process
};

// "cpu" or "cuda:N". INVALID_ARGUMENT for a name that is not a torch device;
// FAILED_PRECONDITION naming the device, where its name came from and what
// the host has when it asks for a CUDA device the host does not have.
absl::StatusOr<std::string> MapTorchDevice(const TorchDeviceInputs& in);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_ENV_TORCH_DEVICE_MAP_H_
