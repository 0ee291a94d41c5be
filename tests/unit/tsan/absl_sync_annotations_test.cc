// The ThreadSanitizer leg's own check: with Debian's uninstrumented Abseil,
// locked data is reported as racy unless the annotated entry points of
// tests/support/tsan_absl_sync.cc are the ones called; and those
// annotations must not hide a race that no lock orders.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

constexpr int kThreads = 4;
constexpr int kIncrements = 20000;

// Without the annotations TSan reported this loop 3-5 times in every run.
TEST(TsanAbslSync, DataUnderMutexLockIsNotReported) {
  absl::Mutex mu;
  long counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        absl::MutexLock lock(&mu);
        ++counter;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(counter, long{kThreads} * kIncrements);
}

TEST(TsanAbslSync, AwaitCondVarAndReaderLocksOrderTheirData) {
  absl::Mutex mu;
  absl::CondVar cv;
  int stage = 0;
  long data = 0;
  std::thread other([&] {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* s) { return *s == 1; }, &stage));
    data += 10;  // written after the main thread's write, under the lock
    stage = 2;
    cv.Signal();
  });
  {
    absl::MutexLock lock(&mu);
    data = 1;
    stage = 1;
    while (stage != 2) cv.WaitWithTimeout(&mu, absl::Seconds(10));
  }
  other.join();
  absl::ReaderMutexLock lock(&mu);
  EXPECT_EQ(data, 11);
}

TEST(TsanAbslSync, ANotificationPublishesWhatCameBeforeIt) {
  long published = 0;
  absl::Notification done;
  std::thread writer([&] {
    published = 42;
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(published, 42);
  writer.join();
}

// A Status copied to another thread: whichever thread drops the last copy
// frees the message the other one read.
TEST(TsanAbslSync, AStatusIsFreedByItsLastCopyOnAnyThread) {
  size_t read = 0;
  for (int i = 0; i < 200; ++i) {
    auto theirs = std::make_unique<absl::Status>(absl::InternalError(std::string(64, 'x')));
    absl::Status mine = *theirs;
    std::thread other([copy = std::move(theirs)]() mutable { copy.reset(); });
    read += mine.message().size();
    mine = absl::OkStatus();
    other.join();
  }
  EXPECT_EQ(read, 200u * 64);
}

// The same two threads with no lock between them: TSan must still say so
// (its exit code is 66 once it has reported).
TEST(TsanAbslSyncDeathTest, ARaceWithoutALockIsStillReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        long racy = 0;
        std::thread a([&] { ++racy; });
        std::thread b([&] { ++racy; });
        a.join();
        b.join();
        std::exit(racy > 0 ? 0 : 1);
      },
      testing::ExitedWithCode(66), "ThreadSanitizer: data race");
}

}  // namespace
