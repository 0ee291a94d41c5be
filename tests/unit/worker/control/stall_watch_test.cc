// The stall watch (worker_daemon/src/control/stall_watch.h) over the
// in-memory transport, in virtual time (a fake clock): a wait on a peer that
// never sends ends with ABORTED exactly once a newer version is known and the
// grace has passed, and only then; at once (a shorter grace) when the newer
// version leaves out a device of the running one.
#include "control/stall_watch.h"

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "fake_clock.h"
#include "gtest/gtest.h"
#include "pipeplan/worker/transport/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

using testing::FakeClock;

constexpr absl::Duration kPoll = absl::Milliseconds(10);

struct Watched {
  FakeClock clock;
  std::atomic<int64_t> latest{1};
  std::atomic<int64_t> aborted_version{0};
  absl::Mutex mu;
  std::vector<std::string> latest_devices ABSL_GUARDED_BY(mu);
  StallWatch watch{[this] { return latest.load(); },
                   [this](int64_t v) { aborted_version.store(v); }, kPoll, clock,
                   [this] {
                     absl::MutexLock l(&mu);
                     return latest_devices;
                   }};

  // The planner published `version` on `devices`.
  void Publish(int64_t version, std::vector<std::string> devices) {
    {
      absl::MutexLock l(&mu);
      latest_devices = std::move(devices);
    }
    latest.store(version);
  }

  // Moves time on by `d` in polls, each one checked by the watch before the
  // next.
  void Advance(absl::Duration d) {
    for (absl::Duration done; done < d; done += kPoll) {
      clock.Advance(kPoll);
      ASSERT_TRUE(clock.AwaitPendingWait(kPoll));
    }
  }
};

// Rank 0 of a two-rank hub with a receive posted from rank 1, which never
// sends: a hung peer.
struct HungPeer {
  MemoryHub hub{2};
  std::unique_ptr<Transport> t = hub.Connect(0);
  int64_t never = 0;
  absl::StatusOr<std::unique_ptr<PendingOp>> recv =
      t->Recv(1, 7, std::as_writable_bytes(std::span<int64_t>(&never, 1)));
};

TEST(StallWatch, AWaitOnAHungPeerEndsOnceANewerVersionOutlastsTheGrace) {
  HungPeer peer;
  Transport* t = peer.t.get();
  ASSERT_TRUE(peer.recv.ok());
  Watched w;
  ASSERT_TRUE(w.clock.AwaitPendingWait(kPoll));
  {
    StallWatch::Scope scope(w.watch, t, 1, absl::Milliseconds(300));
    w.Advance(absl::Milliseconds(100));
    w.latest.store(2);  // the planner replanned without the hung peer
    // The grace counts from the poll that saw the newer version.
    w.Advance(absl::Milliseconds(300));
    EXPECT_EQ(w.aborted_version.load(), 0) << "aborted before the grace";
    w.Advance(kPoll);
    EXPECT_EQ(w.aborted_version.load(), 1);
    EXPECT_EQ((*peer.recv)->Wait(absl::Seconds(30)).code(), absl::StatusCode::kAborted);
  }
  // The transport stays aborted: the step loop drops it.
  EXPECT_EQ(t->Send(1, 8, {}).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(t->AllReduceMax(1, absl::Seconds(1)).status().code(), absl::StatusCode::kAborted);
}

TEST(StallWatch, StepsThatCompleteWhileANewerVersionWaitsAreNotAborted) {
  MemoryHub hub(2);
  std::unique_ptr<Transport> a = hub.Connect(0);
  std::unique_ptr<Transport> b = hub.Connect(1);
  Watched w;
  ASSERT_TRUE(w.clock.AwaitPendingWait(kPoll));
  w.latest.store(2);  // known from the start: the new version compiles meanwhile
  // Twenty steps of 200 ms each, 4 s in all, with a grace of 300 ms: each
  // step makes progress and re-arms the watch.
  for (int step = 0; step < 20; ++step) {
    int64_t got = 0, sent = step;
    auto recv = a->Recv(1, step, std::as_writable_bytes(std::span<int64_t>(&got, 1)));
    ASSERT_TRUE(recv.ok());
    StallWatch::Scope scope(w.watch, a.get(), 1, absl::Milliseconds(300));
    w.Advance(absl::Milliseconds(200));
    ASSERT_TRUE(b->Send(0, step, std::as_bytes(std::span<int64_t>(&sent, 1))).ok());
    ASSERT_TRUE((*recv)->Wait(absl::Seconds(5)).ok()) << "step " << step;
    EXPECT_EQ(got, step);
  }
  EXPECT_EQ(w.aborted_version.load(), 0);
}

// The planner published a version without cpu1 (its worker was lost): the
// wait on it ends after the shrink grace, not the lease-long one; a newer
// version on the same devices (a calibration replan) keeps the long grace.
TEST(StallWatch, AVersionWithoutARunningDeviceEndsTheWaitAfterTheShorterGrace) {
  HungPeer peer;
  ASSERT_TRUE(peer.recv.ok());
  Watched w;
  ASSERT_TRUE(w.clock.AwaitPendingWait(kPoll));
  const StallWatch::Shrink shrink{.devices = {"cpu0", "cpu1"}, .grace = absl::Milliseconds(200)};
  {
    StallWatch::Scope scope(w.watch, peer.t.get(), 1, absl::Seconds(10), shrink);
    w.Publish(2, {"cpu1", "cpu0"});  // the same devices: a planned switch
    w.Advance(absl::Seconds(1));
    EXPECT_EQ(w.aborted_version.load(), 0) << "a planned switch has the long grace";
  }
  StallWatch::Scope scope(w.watch, peer.t.get(), 1, absl::Seconds(10), shrink);
  w.Publish(3, {"cpu0"});
  w.Advance(absl::Milliseconds(150));
  EXPECT_EQ(w.aborted_version.load(), 0);
  w.Advance(absl::Milliseconds(100));
  EXPECT_EQ(w.aborted_version.load(), 1) << "aborted within the shrink grace";
  EXPECT_EQ((*peer.recv)->Wait(absl::Seconds(30)).code(), absl::StatusCode::kAborted);
}

TEST(StallWatch, WithoutANewerVersionAHangIsLeftToTheCommTimeout) {
  HungPeer peer;
  ASSERT_TRUE(peer.recv.ok());
  Watched w;
  ASSERT_TRUE(w.clock.AwaitPendingWait(kPoll));
  StallWatch::Scope scope(w.watch, peer.t.get(), 1, absl::Milliseconds(50));
  w.Advance(absl::Seconds(5));
  EXPECT_EQ(w.aborted_version.load(), 0);
  EXPECT_EQ((*peer.recv)->Wait(absl::Milliseconds(1)).code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace pipeplan::worker
