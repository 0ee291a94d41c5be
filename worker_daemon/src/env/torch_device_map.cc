#include "pipeplan/worker/env/torch_device_map.h"

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/common/torch_device.h"

namespace pipeplan::worker {
namespace {

std::string HostHas(int cuda_devices) {
  if (cuda_devices <= 0) {
    return "this host has no CUDA device (a CPU-only LibTorch, or no GPU visible)";
  }
  return absl::StrCat("this host has ", cuda_devices, " CUDA device", cuda_devices == 1 ? "" : "s",
                      " (cuda:0",
                      cuda_devices == 1 ? "" : absl::StrCat(" to cuda:", cuda_devices - 1), ")");
}

}  // namespace

absl::StatusOr<std::string> MapTorchDevice(const TorchDeviceInputs& in) {
  std::string source;
  common::TorchDeviceName name;
  if (!in.flag.empty()) {
    source = "--torch-device";
    PIPEPLAN_ASSIGN_OR_RETURN(name, common::ParseTorchDevice(in.flag));
  } else if (!in.cluster_name.empty()) {
    source = "the cluster's torch_device";
    PIPEPLAN_ASSIGN_OR_RETURN(name, common::ParseTorchDevice(in.cluster_name));
  } else if (in.cuda_devices > 0) {
    source = absl::StrCat("its local index ", in.local_index, " on its host");
    name = {.cuda = true, .index = in.local_index};
  } else {
    return std::string("cpu");
  }
  if (name.cuda && name.index >= in.cuda_devices) {
    return absl::FailedPreconditionError(absl::StrCat("device \"", in.device_id, "\" maps to ",
                                                      name.ToString(), " (from ", source, "), but ",
                                                      HostHas(in.cuda_devices)));
  }
  return name.ToString();
}

}  // namespace pipeplan::worker
