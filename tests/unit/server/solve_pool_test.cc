#include "pipeplan/server/solve/solve_pool.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/synchronization/notification.h"

namespace pipeplan::server {
namespace {

TEST(SolvePool, RunsEveryAdmittedTask) {
  std::atomic<int> ran{0};
  {
    SolvePool pool(2, 100);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool.Submit([&] { ran++; }).ok());
    EXPECT_TRUE(pool.WaitIdle(absl::Seconds(10)));
    EXPECT_EQ(pool.running(), 0);
    EXPECT_EQ(pool.queued(), 0);
  }
  EXPECT_EQ(ran.load(), 50);
}

TEST(SolvePool, RejectsBeyondMaxPendingWithResourceExhausted) {
  SolvePool pool(1, 2);
  absl::Notification release;
  absl::Notification started;
  ASSERT_TRUE(pool.Submit([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
  ASSERT_TRUE(pool.Submit([] {}).ok());  // queued
  absl::Status s = pool.Submit([] {});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_concurrent_solves=2"), std::string::npos);
  EXPECT_FALSE(pool.WaitIdle(absl::Milliseconds(20)));
  release.Notify();
  EXPECT_TRUE(pool.WaitIdle(absl::Seconds(10)));
  EXPECT_TRUE(pool.Submit([] {}).ok());
}

TEST(SolvePool, ShutdownRunsAdmittedAndRejectsNew) {
  std::atomic<int> ran{0};
  SolvePool pool(1, 10);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.Submit([&] { ran++; }).ok());
  pool.Shutdown();
  EXPECT_EQ(ran.load(), 5);
  EXPECT_EQ(pool.Submit([] {}).code(), absl::StatusCode::kUnavailable);
}

TEST(SolvePool, ObserverSeesRunningAndIdle) {
  SolvePool pool(1, 10);
  std::atomic<int> max_running{0}, last_running{-1};
  pool.SetObserver([&](int running, int) {
    if (running > max_running) max_running = running;
    last_running = running;
  });
  ASSERT_TRUE(pool.Submit([] {}).ok());
  ASSERT_TRUE(pool.WaitIdle(absl::Seconds(10)));
  pool.Shutdown();
  EXPECT_EQ(max_running.load(), 1);
  EXPECT_EQ(last_running.load(), 0);
}

}  // namespace
}  // namespace pipeplan::server
