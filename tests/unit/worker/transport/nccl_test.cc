// The NCCL transport between two ranks of this process. Needs two GPUs and a
// build with NCCL; skips otherwise.
#include <cstring>
#include <thread>

#include "gtest/gtest.h"
#include "map_key_value.h"
#include "pipeplan/worker/transport/nccl_transport.h"

namespace pipeplan::worker {
namespace {

TEST(NcclTransport, SendRecvBetweenTwoGpus) {
  if (!NcclAvailable())
    GTEST_SKIP() << "built without NCCL (CUDA/NCCL not found at configure time)";
  const int gpus = CudaDeviceCount();
  if (gpus < 2) {
    GTEST_SKIP() << "needs 2 CUDA devices, found " << gpus
                 << " (cudaGetDeviceCount failed or returned fewer)";
  }
  MapKeyValue kv;
  std::vector<absl::Status> status(2);
  std::vector<std::vector<int>> got(2, std::vector<int>(1024, 0));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto t = ConnectNccl({.rank = r, .size = 2, .device_ordinal = r}, kv, "v1/");
      if (!t.ok()) {
        status[r] = t.status();
        return;
      }
      std::vector<int> mine(1024, r + 1);
      auto send = (*t)->Send(1 - r, 0, std::as_bytes(std::span<int>(mine)));
      if (!send.ok()) {
        status[r] = send.status();
        return;
      }
      auto recv = (*t)->Recv(1 - r, 0, std::as_writable_bytes(std::span<int>(got[r])));
      if (!recv.ok()) {
        status[r] = recv.status();
        return;
      }
      status[r] = (*send)->Wait(absl::Seconds(30));
      if (status[r].ok()) status[r] = (*recv)->Wait(absl::Seconds(30));
      if (status[r].ok()) {
        auto m = (*t)->AllReduceMax(r, absl::Seconds(30));
        if (!m.ok() || *m != 1) status[r] = absl::InternalError("all-reduce");
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  EXPECT_EQ(got[0][1023], 2);
  EXPECT_EQ(got[1][0], 1);
}

}  // namespace
}  // namespace pipeplan::worker
