// Rendezvous rounds (worker_daemon/src/rendezvous_round.h): the protocol on
// an in-memory key-value space, and real Gloo meshes on 127.0.0.1 that must
// connect although the key-value space holds a crashed run's keys.
#include "pipeplan/worker/transport/rendezvous_round.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "map_key_value.h"

namespace pipeplan::worker {
namespace {

RoundMember Member(int rank, int size, std::string nonce, absl::Duration timeout) {
  return {.base = "v1/gloo/",
          .rank = rank,
          .size = size,
          .nonce = std::move(nonce),
          .timeout = timeout};
}

TEST(RendezvousRound, OthersJoinOnlyARoundThatNamesThem) {
  MapKeyValue kv;
  const RoundMember zero = Member(0, 2, "a0", absl::Seconds(5));
  const RoundMember one = Member(1, 2, "b1", absl::Milliseconds(200));
  ASSERT_TRUE(RendezvousRound::Announce(kv, zero).ok());
  // A crashed run's round names another process at rank 1.
  ASSERT_TRUE(kv.Set("v1/gloo/round", "oldround;a0,old1").ok());
  EXPECT_EQ(RendezvousRound::Next(kv, one, "").status().code(),
            absl::StatusCode::kDeadlineExceeded);

  ASSERT_TRUE(RendezvousRound::Announce(kv, one).ok());
  absl::StatusOr<RendezvousRound> opened = RendezvousRound::Next(kv, zero, "");
  ASSERT_TRUE(opened.ok()) << opened.status();
  absl::StatusOr<RendezvousRound> joined = RendezvousRound::Next(kv, one, "");
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->id(), opened->id());
  EXPECT_EQ(joined->prefix(), opened->prefix());
  EXPECT_NE(opened->prefix(), "v1/gloo/round/oldround/");

  // A round this process already tried is not joined again.
  EXPECT_EQ(RendezvousRound::Next(kv, one, opened->id()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<RendezvousRound> reopened = RendezvousRound::Next(kv, zero, "");
  ASSERT_TRUE(reopened.ok());
  EXPECT_NE(reopened->id(), opened->id());
}

TEST(RendezvousRound, ARoundEndsWhenAPeerRestartsOrRankZeroMovesOn) {
  MapKeyValue kv;
  const RoundMember zero = Member(0, 3, "a0", absl::Seconds(5));
  const RoundMember one = Member(1, 3, "b1", absl::Seconds(5));
  ASSERT_TRUE(RendezvousRound::Announce(kv, zero).ok());
  ASSERT_TRUE(RendezvousRound::Announce(kv, one).ok());
  ASSERT_TRUE(kv.Set("v1/gloo/nonce/2", "dead2").ok());
  absl::StatusOr<RendezvousRound> r0 = RendezvousRound::Next(kv, zero, "");
  ASSERT_TRUE(r0.ok());
  absl::StatusOr<RendezvousRound> r1 = RendezvousRound::Next(kv, one, "");
  ASSERT_TRUE(r1.ok());
  EXPECT_TRUE(r0->StillCurrent(kv, 2).ok());
  EXPECT_TRUE(r1->StillCurrent(kv, 0).ok());

  // Rank 2 comes back as a new process: waiting for its keys is pointless.
  ASSERT_TRUE(kv.Set("v1/gloo/nonce/2", "new2").ok());
  EXPECT_EQ(r0->StillCurrent(kv, 2).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(r0->StillCurrent(kv, 1).ok());

  // Rank 0 opens the next round: rank 1's wait on any peer ends.
  ASSERT_TRUE(RendezvousRound::Next(kv, zero, "").ok());
  EXPECT_EQ(r1->StillCurrent(kv, 0).code(), absl::StatusCode::kUnavailable);
}

// A planner restart loses the rendezvous keys (they live in its memory):
// waiting in that round is pointless for every rank.
TEST(RendezvousRound, ARoundEndsWhenThePlannerLostItsKeys) {
  MapKeyValue kv;
  const RoundMember zero = Member(0, 2, "a0", absl::Seconds(5));
  const RoundMember one = Member(1, 2, "b1", absl::Seconds(5));
  ASSERT_TRUE(RendezvousRound::Announce(kv, zero).ok());
  ASSERT_TRUE(RendezvousRound::Announce(kv, one).ok());
  absl::StatusOr<RendezvousRound> r0 = RendezvousRound::Next(kv, zero, "");
  ASSERT_TRUE(r0.ok());
  absl::StatusOr<RendezvousRound> r1 = RendezvousRound::Next(kv, one, "");
  ASSERT_TRUE(r1.ok());
  MapKeyValue restarted;  // the same planner address, none of the keys
  EXPECT_EQ(r0->StillCurrent(restarted, 1).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r1->StillCurrent(restarted, 0).code(), absl::StatusCode::kUnavailable);
}

// `size` ranks restart after a crash: the key-value space still holds the
// previous run's nonces, round and Gloo addresses (ports nobody listens on).
// Rank r starts r * 300 ms after rank 0, so rank 0 first opens a round with
// stale nonces. Every rank must connect well before the connect timeout
// (the stale round is abandoned as soon as a peer announces itself), and the
// mesh must carry a message around the ring.
void RestartAfterCrash(int size) {
  MapKeyValue kv;
  std::string old_round = "crashed;";
  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(kv.Set(absl::StrCat("v1/gloo/nonce/", r), absl::StrCat("old", r)).ok());
    absl::StrAppend(&old_round, r ? "," : "", "old", r);
    ASSERT_TRUE(kv.Set(absl::StrCat("v1/gloo/round/crashed/", r), std::string(64, '\1')).ok());
  }
  ASSERT_TRUE(kv.Set("v1/gloo/round", old_round).ok());

  const absl::Duration connect_timeout = absl::Seconds(20);
  std::vector<absl::Status> status(size);
  std::vector<absl::Duration> took(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300 * r));
      const absl::Time start = absl::Now();
      const RoundMember m = Member(r, size, absl::StrCat("new", r), connect_timeout);
      absl::StatusOr<std::unique_ptr<Transport>> t =
          ConnectInRounds(kv, m, start + 3 * connect_timeout, [&](const RendezvousRound& round) {
            return ConnectGlooInRound(kv, round,
                                      {.rank = r,
                                       .size = size,
                                       .timeout = absl::Seconds(10),
                                       .connect_timeout = connect_timeout},
                                      connect_timeout);
          });
      took[r] = absl::Now() - start;
      if (!t.ok()) {
        status[r] = t.status();
        return;
      }
      int64_t mine = r, theirs = -1;
      auto send = (*t)->Send((r + 1) % size, 7, std::as_bytes(std::span<int64_t>(&mine, 1)));
      auto recv = (*t)->Recv((r + size - 1) % size, 7,
                             std::as_writable_bytes(std::span<int64_t>(&theirs, 1)));
      if (!send.ok() || !recv.ok()) {
        status[r] = send.ok() ? recv.status() : send.status();
        return;
      }
      status[r] = (*send)->Wait(absl::Seconds(10));
      if (status[r].ok()) status[r] = (*recv)->Wait(absl::Seconds(10));
      if (status[r].ok() && theirs != (r + size - 1) % size) {
        status[r] = absl::InternalError(absl::StrCat("rank ", r, " got ", theirs));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    EXPECT_LT(took[r], connect_timeout / 2) << "rank " << r << " waited for a timeout";
  }
}

// A newer plan version leaves out the peer this version waits for: every
// wait of the round (rank 0's for nonces, the others' for the round, a Gloo
// wait for a peer's address) ends with the abandon status within a poll,
// not after the connect timeout (issue 26: survivors sat 30-90 s here).
TEST(RendezvousRound, EveryWaitEndsOnceTheMemberAbandonsTheVersion) {
  MapKeyValue kv;
  std::atomic<bool> superseded{false};
  auto member = [&](int rank, const std::string& nonce) {
    RoundMember m = Member(rank, 3, nonce, absl::Seconds(60));
    m.abandon = [&superseded]() -> absl::Status {
      if (superseded.load()) return absl::AbortedError("plan version 2 is known");
      return absl::OkStatus();
    };
    return m;
  };
  const RoundMember zero = member(0, "a0"), one = member(1, "b1");
  ASSERT_TRUE(RendezvousRound::Announce(kv, zero).ok());
  ASSERT_TRUE(RendezvousRound::Announce(kv, one).ok());
  // Rank 2 never comes: rank 0 waits for its nonce, rank 1 for the round.
  absl::Status opened, joined;
  std::thread t0([&] { opened = RendezvousRound::Next(kv, zero, "").status(); });
  std::thread t1([&] { joined = RendezvousRound::Next(kv, one, "").status(); });
  // Both are blocked on a key that never comes; then the newer version.
  while (kv.gets() < 4) std::this_thread::yield();
  const absl::Time start = absl::Now();
  superseded.store(true);
  t0.join();
  t1.join();
  EXPECT_EQ(opened.code(), absl::StatusCode::kAborted) << opened;
  EXPECT_EQ(joined.code(), absl::StatusCode::kAborted) << joined;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "waited for the connect timeout";
  // Nor does another round start.
  absl::StatusOr<std::unique_ptr<Transport>> t =
      ConnectInRounds(kv, zero, absl::Now() + absl::Seconds(60), [](const RendezvousRound&) {
        return absl::StatusOr<std::unique_ptr<Transport>>(absl::UnavailableError("not reached"));
      });
  EXPECT_EQ(t.status().code(), absl::StatusCode::kAborted);
}

TEST(RendezvousRound, TwoRanksRestartedAfterACrashConnect) { RestartAfterCrash(2); }
TEST(RendezvousRound, FourRanksRestartedAfterACrashConnect) { RestartAfterCrash(4); }

}  // namespace
}  // namespace pipeplan::worker
