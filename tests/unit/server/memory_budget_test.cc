#include "pipeplan/server/solve/memory_budget.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "test_util.h"

namespace pipeplan::server {
namespace {

TEST(MemoryBudget, ReservesUpToItsCapacityAndNamesTheFlag) {
  MemoryBudget budget(100);
  auto a = budget.TryReserve(60);
  ASSERT_TRUE(a.ok());
  auto b = budget.TryReserve(40);  // exactly full
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(budget.in_use(), 100);
  auto c = budget.TryReserve(1);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("--solve-memory-bytes=100; retry later"), std::string::npos)
      << c.status();
  a->reset();  // the last copy gives the bytes back
  EXPECT_EQ(budget.in_use(), 40);
  EXPECT_TRUE(budget.TryReserve(60).ok());
  EXPECT_EQ(budget.in_use(), 40);  // that reservation was dropped at once
}

TEST(MemoryBudget, ARequestLargerThanTheWholeBudgetCanNeverRun) {
  MemoryBudget budget(100);
  for (auto s :
       {budget.TryReserve(101).status(), budget.Reserve(101, absl::Milliseconds(1)).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(s.message().find("more than the whole solve memory budget --solve-memory-bytes=100"),
              std::string::npos)
        << s;
  }
}

TEST(MemoryBudget, ReserveWaitsForRoom) {
  MemoryBudget budget(100);
  auto held = budget.TryReserve(80);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(budget.Reserve(30, absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kResourceExhausted);
  absl::Notification waiting;
  std::thread releaser([&] {
    waiting.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(50));
    held->reset();
  });
  waiting.Notify();
  auto got = budget.Reserve(30, absl::Seconds(30));
  releaser.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(budget.in_use(), 30);
}

TEST(MemoryBudget, ZeroCapacityIsUnlimited) {
  MemoryBudget budget(0);
  auto r = budget.TryReserve(int64_t{1} << 50);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(budget.in_use(), int64_t{1} << 50);
}

TEST(EstimateSolveBytes, GrowsWithNodesEdgesBytesAndDevicePairs) {
  const v1::PlanRequest small = testing::SmallRequest();
  const int64_t base = EstimateSolveBytes(small, static_cast<int64_t>(small.ByteSizeLong()));
  EXPECT_GT(base, 0);
  v1::PlanRequest more_nodes = small;
  for (int i = 0; i < 1000; ++i) more_nodes.mutable_graph()->add_nodes();
  EXPECT_GE(EstimateSolveBytes(more_nodes, static_cast<int64_t>(small.ByteSizeLong())),
            base + 1000 * 1024);
  EXPECT_GE(EstimateSolveBytes(small, static_cast<int64_t>(small.ByteSizeLong()) + 1'000'000),
            base + 1'000'000);
  v1::PlanRequest many_devices = small;
  for (int i = 0; i < 4096; ++i) many_devices.mutable_cluster()->add_devices();
  // The bandwidth and latency matrices alone: 16 bytes per device pair.
  EXPECT_GT(EstimateSolveBytes(many_devices, 0), int64_t{16} * 4104 * 4104);
  // From 1,000 nodes on, a search that may run the MILP gets its allowance.
  const int64_t dp = EstimateSolveBytes(more_nodes, 0);
  more_nodes.mutable_options()->set_method(v1::METHOD_AUTO);
  EXPECT_GE(EstimateSolveBytes(more_nodes, 0), dp + (int64_t{64} << 20));
  // Negative sizes (a caller's bug) do not make the estimate smaller.
  EXPECT_GE(EstimateSolveBytes(small, -5), EstimateSolveBytes(small, 0));
}

}  // namespace
}  // namespace pipeplan::server
