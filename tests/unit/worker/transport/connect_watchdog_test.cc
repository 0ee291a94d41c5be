// The watchdog around a connect attempt (transport/connect_watchdog.h): a
// connect blocked where nothing can interrupt it (Gloo's Pair::connect after
// a peer restarted, issue 26) is given up at its deadline or as soon as the
// caller must move on, its thread left behind and cut off from the caller's
// key-value space.
#include "pipeplan/worker/transport/connect_watchdog.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "map_key_value.h"

namespace pipeplan::worker {
namespace {

// A connect that blocks until the test releases it, and then fails.
struct Blocked {
  std::shared_ptr<absl::Notification> release = std::make_shared<absl::Notification>();
  std::shared_ptr<absl::Notification> started = std::make_shared<absl::Notification>();
  ConnectFn Fn() const {
    return [release = release, started = started]() -> absl::StatusOr<std::unique_ptr<Transport>> {
      started->Notify();
      release->WaitForNotification();
      return absl::UnavailableError("released");
    };
  }
};

TEST(ConnectWatchdog, ABlockedConnectIsLeftBehindAtTheDeadline) {
  Blocked blocked;
  bool left = false;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Transport>> t = ConnectWithWatchdog(
      blocked.Fn(), start + absl::Milliseconds(300), nullptr, [&left] { left = true; });
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDeadlineExceeded) << t.status();
  EXPECT_TRUE(left);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  blocked.release->Notify();  // the thread left behind ends
}

TEST(ConnectWatchdog, GivingUpEndsTheWaitWithItsStatus) {
  Blocked blocked;
  std::atomic<bool> newer{false};
  bool left = false;
  absl::Status result;
  absl::Notification done;
  std::thread waiter([&] {
    result =
        ConnectWithWatchdog(
            blocked.Fn(), absl::Now() + absl::Seconds(60),
            [&newer] {
              return newer.load() ? absl::AbortedError("version 3 is known") : absl::OkStatus();
            },
            [&left] { left = true; })
            .status();
    done.Notify();
  });
  blocked.started->WaitForNotification();
  const absl::Time start = absl::Now();
  newer.store(true);
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  waiter.join();
  EXPECT_EQ(result.code(), absl::StatusCode::kAborted) << result;
  EXPECT_TRUE(left);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  blocked.release->Notify();
}

TEST(ConnectWatchdog, AConnectThatEndsInTimeIsReturned) {
  absl::StatusOr<std::unique_ptr<Transport>> t = ConnectWithWatchdog(
      [] { return absl::StatusOr<std::unique_ptr<Transport>>(absl::InternalError("bad rank")); },
      absl::Now() + absl::Seconds(60), nullptr, [] { FAIL() << "nothing was left behind"; });
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInternal);
}

TEST(ConnectWatchdog, AClosedKeyValueNeverReachesTheCallersAgain) {
  MapKeyValue kv;
  ClosableKeyValue guarded(&kv);
  ASSERT_TRUE(guarded.Set("a", "1").ok());
  absl::StatusOr<std::optional<std::string>> a = guarded.Get("a");
  ASSERT_TRUE(a.ok() && a->has_value());
  const int gets = kv.gets();
  guarded.Close();
  EXPECT_EQ(guarded.Get("a").status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(guarded.Set("b", "2").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(kv.gets(), gets);
  absl::StatusOr<std::optional<std::string>> b = kv.Get("b");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->has_value());
}

}  // namespace
}  // namespace pipeplan::worker
