// The stall watch (worker_daemon/src/stall_watch.h) over the in-memory
// transport: a wait on a peer that never sends ends with ABORTED once a
// newer version is known and the grace has passed, and only then.
#include "stall_watch.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "pipeplan/worker/gloo_transport.h"
#include "pipeplan/worker/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

struct Watched {
  std::atomic<int64_t> latest{1};
  std::atomic<int64_t> aborted_version{0};
  StallWatch watch{[this] { return latest.load(); },
                   [this](int64_t v) { aborted_version.store(v); }, absl::Milliseconds(10)};
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
  auto& recv = peer.recv;
  ASSERT_TRUE(recv.ok());
  Watched w;
  std::thread planner([&] {
    absl::SleepFor(absl::Milliseconds(100));
    w.latest.store(2);  // the planner replanned without the hung peer
  });
  const absl::Time start = absl::Now();
  absl::Status s;
  {
    StallWatch::Scope scope(w.watch, t, 1, absl::Milliseconds(300));
    s = (*recv)->Wait(absl::Seconds(30));
  }
  planner.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(400));  // newer at 100 ms + grace
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(w.aborted_version.load(), 1);
  // The transport stays aborted: the step loop drops it.
  EXPECT_EQ(t->Send(1, 8, {}).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(t->AllReduceMax(1, absl::Seconds(1)).status().code(), absl::StatusCode::kAborted);
}

TEST(StallWatch, StepsThatCompleteWhileANewerVersionWaitsAreNotAborted) {
  MemoryHub hub(2);
  std::unique_ptr<Transport> a = hub.Connect(0);
  std::unique_ptr<Transport> b = hub.Connect(1);
  Watched w;
  w.latest.store(2);  // known from the start: the new version compiles meanwhile
  // Twenty steps of 50 ms each, 1 s in all, with a grace of 300 ms: each
  // step makes progress and re-arms the watch.
  for (int step = 0; step < 20; ++step) {
    int64_t got = 0, sent = step;
    auto recv = a->Recv(1, step, std::as_writable_bytes(std::span<int64_t>(&got, 1)));
    ASSERT_TRUE(recv.ok());
    StallWatch::Scope scope(w.watch, a.get(), 1, absl::Milliseconds(300));
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(b->Send(0, step, std::as_bytes(std::span<int64_t>(&sent, 1))).ok());
    ASSERT_TRUE((*recv)->Wait(absl::Seconds(5)).ok()) << "step " << step;
    EXPECT_EQ(got, step);
  }
  EXPECT_EQ(w.aborted_version.load(), 0);
}

TEST(StallWatch, WithoutANewerVersionAHangIsLeftToTheCommTimeout) {
  HungPeer peer;
  Transport* t = peer.t.get();
  auto& recv = peer.recv;
  ASSERT_TRUE(recv.ok());
  Watched w;
  StallWatch::Scope scope(w.watch, t, 1, absl::Milliseconds(50));
  EXPECT_EQ((*recv)->Wait(absl::Milliseconds(500)).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(w.aborted_version.load(), 0);
}

// The real transport: a receive from a live peer that never sends ends with
// ABORTED when another thread aborts the transport, and so does every later
// operation.
TEST(GlooTransportAbort, EndsAPendingReceiveFromAnotherThread) {
  gloo::rendezvous::HashStore store;
  std::vector<absl::StatusOr<std::unique_ptr<Transport>>> t(2);
  std::vector<std::thread> connect;
  for (int r = 0; r < 2; ++r) {
    connect.emplace_back([&, r] {
      t[r] = ConnectGloo({.rank = r, .size = 2, .connect_timeout = absl::Seconds(20)}, store);
    });
  }
  for (std::thread& th : connect) th.join();
  ASSERT_TRUE(t[0].ok()) << t[0].status();
  ASSERT_TRUE(t[1].ok()) << t[1].status();
  int64_t never = 0;
  auto recv = (*t[0])->Recv(1, 3, std::as_writable_bytes(std::span<int64_t>(&never, 1)));
  ASSERT_TRUE(recv.ok());
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    (*t[0])->Abort();
  });
  const absl::Time start = absl::Now();
  const absl::Status s = (*recv)->Wait(absl::Seconds(30));
  aborter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ((*t[0])->Send(1, 4, std::as_bytes(std::span<int64_t>(&never, 1))).status().code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ((*t[0])->AllReduceMax(1, absl::Seconds(1)).status().code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace pipeplan::worker
