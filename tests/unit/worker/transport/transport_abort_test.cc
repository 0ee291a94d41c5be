// Transport::Abort on the real Gloo transport: what the stall watch relies on
// to end a wait on a hung peer (control/stall_watch_test.cc tests the watch
// over the in-memory transport).
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "pipeplan/worker/transport/gloo_transport.h"

namespace pipeplan::worker {
namespace {

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

// A peer whose process goes away closes its sockets: the pending receive
// from it fails at once with UNAVAILABLE, and the transport names the peer,
// which the worker reports to the planner (a dead peer is declared lost at
// once instead of after its lease). An abort names nobody.
TEST(GlooTransportAbort, APeerThatClosesItsSocketsIsNamedUnreachable) {
  gloo::rendezvous::HashStore store;
  std::vector<absl::StatusOr<std::unique_ptr<Transport>>> t(3);
  std::vector<std::thread> connect;
  for (int r = 0; r < 3; ++r) {
    connect.emplace_back([&, r] {
      t[r] = ConnectGloo({.rank = r, .size = 3, .connect_timeout = absl::Seconds(20)}, store);
    });
  }
  for (std::thread& th : connect) th.join();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(t[r].ok()) << t[r].status();
  int64_t never = 0;
  auto recv = (*t[0])->Recv(2, 3, std::as_writable_bytes(std::span<int64_t>(&never, 1)));
  ASSERT_TRUE(recv.ok());
  EXPECT_TRUE((*t[0])->UnreachablePeers().empty());
  t[2]->reset();  // rank 2's sockets close, as when its process dies
  const absl::Time start = absl::Now();
  const absl::Status s = (*recv)->Wait(absl::Seconds(30));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ((*t[0])->UnreachablePeers(), std::vector<int>{2});
  (*t[1])->Abort();
  EXPECT_EQ((*t[1])->AllReduceMax(1, absl::Seconds(1)).status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE((*t[1])->UnreachablePeers().empty());
}

}  // namespace
}  // namespace pipeplan::worker
