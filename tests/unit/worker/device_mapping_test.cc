// Which torch device a worker runs on (MapTorchDevice, TorchDeviceOf over a
// cluster) and which transport ranks that share a GPU use
// (TransportForDevices): pure rules, tested without a GPU.
#include "control/active_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/common/torch_device.h"
#include "pipeplan/worker/env/torch_device_map.h"
#include "pipeplan/worker/transport/device_sharing.h"

namespace pipeplan::worker {
namespace {

using ::testing::HasSubstr;

TEST(ParseTorchDevice, ReadsTheNamesTorchTakes) {
  EXPECT_EQ(common::ParseTorchDevice("cpu")->ToString(), "cpu");
  EXPECT_EQ(common::ParseTorchDevice("cuda")->ToString(), "cuda:0");
  EXPECT_EQ(common::ParseTorchDevice("cuda:3")->ToString(), "cuda:3");
  EXPECT_EQ(common::ParseTorchDevice("2")->ToString(), "cuda:2");
  for (const char* bad : {"", "gpu0", "cuda:", "cuda:-1", "-1", "cuda:1x", " 1", "mps"}) {
    EXPECT_EQ(common::ParseTorchDevice(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(MapTorchDevice, FlagThenClusterThenLocalIndex) {
  TorchDeviceInputs in{.device_id = "g1", .local_index = 1, .cuda_devices = 2};
  EXPECT_EQ(*MapTorchDevice(in), "cuda:1");  // the default: the local index
  in.cluster_name = "0";
  EXPECT_EQ(*MapTorchDevice(in), "cuda:0");
  in.cluster_name = "cuda:1";
  EXPECT_EQ(*MapTorchDevice(in), "cuda:1");
  in.flag = "cpu";
  EXPECT_EQ(*MapTorchDevice(in), "cpu");  // the flag overrides the cluster
}

TEST(MapTorchDevice, CpuWithoutCudaUnlessAskedFor) {
  TorchDeviceInputs in{.device_id = "g1", .local_index = 3, .cuda_devices = 0};
  EXPECT_EQ(*MapTorchDevice(in), "cpu");
  in.cluster_name = "cpu";
  EXPECT_EQ(*MapTorchDevice(in), "cpu");
}

TEST(MapTorchDevice, AMissingDeviceNamesItAndWhatTheHostHas) {
  TorchDeviceInputs in{.device_id = "g1", .cluster_name = "cuda:2", .cuda_devices = 2};
  absl::StatusOr<std::string> got = MapTorchDevice(in);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got.status().message(), HasSubstr("\"g1\" maps to cuda:2"));
  EXPECT_THAT(got.status().message(), HasSubstr("2 CUDA devices (cuda:0 to cuda:1)"));
  in = {.device_id = "g1", .flag = "cuda:0", .cuda_devices = 0};
  got = MapTorchDevice(in);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got.status().message(), HasSubstr("--torch-device"));
  EXPECT_THAT(got.status().message(), HasSubstr("no CUDA device"));
  in = {.device_id = "g1", .cluster_name = "tpu", .cuda_devices = 1};
  EXPECT_EQ(MapTorchDevice(in).status().code(), absl::StatusCode::kInvalidArgument);
}

v1::ClusterTopology TwoHosts() {
  v1::ClusterTopology c;
  for (const auto& [id, host] : std::vector<std::pair<std::string, std::string>>{
           {"a0", "a"}, {"b0", "b"}, {"a1", "a"}, {"b1", "b"}}) {
    v1::Device* d = c.add_devices();
    d->set_id(id);
    d->set_host(host);
  }
  return c;
}

TEST(TorchDeviceOf, LocalIndexCountsTheHostsDevicesInClusterOrder) {
  WorkerOptions o;
  o.executor = "torch";
  o.device_id = "b1";
  v1::ClusterTopology c = TwoHosts();
  // This host's CUDA devices decide between cuda:1 and cpu; either way the
  // mapping itself is exercised with the count the process really sees.
  const std::string want = VisibleCudaDevices() >= 2 ? "cuda:1" : "cpu";
  if (VisibleCudaDevices() == 1) {
    EXPECT_EQ(TorchDeviceOf(o, c).status().code(), absl::StatusCode::kFailedPrecondition);
  } else {
    EXPECT_EQ(*TorchDeviceOf(o, c), want);
  }
  c.mutable_devices(3)->set_torch_device("cpu");
  EXPECT_EQ(*TorchDeviceOf(o, c), "cpu");
  o.torch_device = "cpu";
  c.mutable_devices(3)->set_torch_device("cuda:7");
  EXPECT_EQ(*TorchDeviceOf(o, c), "cpu");  // the flag wins
}

TEST(TorchDeviceOf, WorkersWithoutTorchOrNcclIgnoreTheCluster) {
  WorkerOptions o;
  o.executor = "synthetic";
  o.transport = "gloo";
  o.device_id = "a0";
  v1::ClusterTopology c = TwoHosts();
  c.mutable_devices(0)->set_torch_device("cuda:7");
  EXPECT_EQ(*TorchDeviceOf(o, c), "cpu");
}

TEST(DeviceSharing, RanksOnOneGpuFallBackToGloo) {
  EXPECT_EQ(TransportForDevices("nccl", {"u0", "u1", "u2"}), "nccl");
  EXPECT_EQ(TransportForDevices("nccl", {"u0", "u1", "u0"}), "gloo");
  EXPECT_EQ(TransportForDevices("nccl", {"u0", ""}), "gloo");  // a rank without a GPU
  EXPECT_EQ(TransportForDevices("gloo", {"u0", "u0"}), "gloo");
  EXPECT_EQ(FirstSharedDevice({"u0", "u1", "u2"}), std::nullopt);
  EXPECT_EQ(FirstSharedDevice({"u0", "u1", "u1", "u0"}), std::make_pair(1, 2));
  EXPECT_EQ(FirstSharedDevice({"", ""}), std::nullopt);
}

}  // namespace
}  // namespace pipeplan::worker
