#include "pipeplan/common/retry_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace pipeplan::common {
namespace {

// A fake clock: sleep advances it and records the wait.
struct FakeTime {
  absl::Time now = absl::UnixEpoch();
  std::vector<absl::Duration> waits;
  bool stop_after_waits = false;
  size_t max_waits = 0;
  RetryEnv Env() {
    RetryEnv env;
    env.now = [this] { return now; };
    env.sleep = [this](absl::Duration d) {
      if (stop_after_waits && waits.size() >= max_waits) return false;
      waits.push_back(d);
      now += d;
      return true;
    };
    return env;
  }
};

TEST(RetryPolicy, RetryableCodesAreExactlyTheThreeThatDrain) {
  for (int c = 0; c <= 16; ++c) {
    auto code = static_cast<absl::StatusCode>(c);
    bool expected = code == absl::StatusCode::kUnavailable ||
                    code == absl::StatusCode::kDeadlineExceeded ||
                    code == absl::StatusCode::kResourceExhausted;
    EXPECT_EQ(IsRetryable(code), expected) << c;
  }
}

TEST(RetryPolicy, BackoffGrowsToTheCapAndResets) {
  Backoff b(RetryPolicy{absl::Milliseconds(100), absl::Milliseconds(350), 2.0});
  EXPECT_EQ(b.Next(), absl::Milliseconds(100));
  EXPECT_EQ(b.Next(), absl::Milliseconds(200));
  EXPECT_EQ(b.Next(), absl::Milliseconds(350));
  EXPECT_EQ(b.Next(), absl::Milliseconds(350));
  b.Reset();
  EXPECT_EQ(b.Next(), absl::Milliseconds(100));
}

TEST(RetryPolicy, RetriesRetryableUntilSuccess) {
  FakeTime t;
  int calls = 0;
  absl::StatusOr<int> r =
      RetryUntil(RetryPolicy{}, t.now + absl::Seconds(10), t.Env(), [&]() -> absl::StatusOr<int> {
        if (++calls < 4) return absl::UnavailableError("restarting");
        return 7;
      });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(t.waits, (std::vector<absl::Duration>{absl::Milliseconds(100), absl::Milliseconds(200),
                                                  absl::Milliseconds(400)}));
}

TEST(RetryPolicy, NonRetryableReturnsAtOnce) {
  FakeTime t;
  int calls = 0;
  absl::Status s = RetryUntil(RetryPolicy{}, t.now + absl::Seconds(10), t.Env(), [&] {
    ++calls;
    return absl::InvalidArgumentError("graph.nodes[3]");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(t.waits.empty());
}

TEST(RetryPolicy, GivesUpBeforeAWaitWouldPassTheDeadline) {
  FakeTime t;
  int calls = 0;
  absl::Status s = RetryUntil(RetryPolicy{}, t.now + absl::Milliseconds(750), t.Env(), [&] {
    ++calls;
    return absl::DeadlineExceededError("slow");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  // Waits 100 + 200 + 400 = 700 ms; the next (800 ms) would pass 750 ms.
  EXPECT_EQ(calls, 4);
  EXPECT_LE(t.now, absl::UnixEpoch() + absl::Milliseconds(750));
}

TEST(RetryPolicy, StopsWhenSleepAsksToStop) {
  FakeTime t;
  t.stop_after_waits = true;
  t.max_waits = 1;
  int calls = 0;
  absl::Status s = RetryUntil(RetryPolicy{}, t.now + absl::Hours(1), t.Env(), [&] {
    ++calls;
    return absl::UnavailableError("down");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 2);
}

TEST(PendingBytes, RefusesPastTheLimitNamingItAndReleases) {
  PendingBytes p(1000);
  EXPECT_TRUE(p.Reserve(600).ok());
  absl::Status s = p.Reserve(500);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("1000"), std::string::npos);
  EXPECT_EQ(p.pending(), 600u);
  p.Release(600);
  EXPECT_TRUE(p.Reserve(1000).ok());
  p.Release(5000);  // over-release clamps at zero
  EXPECT_EQ(p.pending(), 0u);
}

}  // namespace
}  // namespace pipeplan::common
