// The host-aware snapshot ring (docs/snapshots.md, "The ring"): for one
// host, equal hosts, uneven hosts and a host with most of the ranks, the
// ring is a permutation, a rank's holder is on another host whenever the
// layout allows it, and otherwise the same-host pairs are the fewest a ring
// can have. Then the ring in use: snapshot rounds over the in-memory
// transport with two "hosts", and both ranks of one host lost together are
// restored from the other host.
#include "pipeplan/worker/snapshot/snapshot_ring.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "on_ranks.h"
#include "pipeplan/worker/package/state_pack.h"
#include "pipeplan/worker/package/state_transfer.h"
#include "pipeplan/worker/snapshot/snapshot_exchange.h"
#include "pipeplan/worker/snapshot/snapshot_restore.h"
#include "pipeplan/worker/transport/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

// Ranks whose holder (the next rank of the ring) is on their own host.
std::vector<int> SameHostHolders(const std::vector<std::string>& hosts,
                                 const std::vector<int>& ring) {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    if (hosts[RingNext(ring, r)] == hosts[r]) out.push_back(r);
  }
  return out;
}

void ExpectPermutation(const std::vector<int>& ring, int n) {
  std::vector<int> sorted = ring;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> expected(n);
  for (int i = 0; i < n; ++i) expected[i] = i;
  EXPECT_EQ(sorted, expected);
}

TEST(SnapshotRing, OneHostKeepsTheRankOrder) {
  const std::vector<std::string> hosts = {"h0", "h0", "h0", "h0"};
  EXPECT_EQ(SnapshotRing(hosts), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(SnapshotRing(std::vector<std::string>{}), std::vector<int>{});
  EXPECT_EQ(SnapshotRing(std::vector<std::string>{"h0"}), std::vector<int>{0});
}

TEST(SnapshotRing, TwoEqualHostsAlternate) {
  // The bench's layout: ranks 0, 1 on h0 and 2, 3 on h1. The plain ring
  // 0->1->2->3 would leave rank 2's snapshot on rank 3, the same host.
  const std::vector<std::string> hosts = {"h0", "h0", "h1", "h1"};
  const std::vector<int> ring = SnapshotRing(hosts);
  EXPECT_EQ(ring, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(RingNext(ring, 2), 1);
  EXPECT_EQ(RingPrev(ring, 2), 0);
  EXPECT_EQ(RingNext(ring, 3), 0);
  EXPECT_TRUE(SameHostHolders(hosts, ring).empty());
  // Interleaved hosts are already apart; the ring keeps them apart.
  const std::vector<std::string> mixed = {"b", "a", "b", "a", "b", "a"};
  EXPECT_TRUE(SameHostHolders(mixed, SnapshotRing(mixed)).empty());
}

TEST(SnapshotRing, UnevenHostsAreApartWhenNoHostHasMoreThanHalf) {
  const std::vector<std::vector<std::string>> layouts = {
      {"h0", "h0", "h0", "h1", "h1", "h2"},
      {"h0", "h1", "h1", "h1", "h2", "h2", "h2"},  // odd count, 3 of 7 on two hosts
      {"a", "a", "b", "c", "d"},
      {"x", "x", "x", "x", "y", "y", "z", "z"},  // exactly half on x
      {"h0", "h1"},
      {"h0", "h1", "h2"},
      {"", "", "h1", "h1"},  // a device the cluster lists without a host
  };
  for (const std::vector<std::string>& hosts : layouts) {
    SCOPED_TRACE(absl::StrJoin(hosts, ","));
    const std::vector<int> ring = SnapshotRing(hosts);
    ExpectPermutation(ring, static_cast<int>(hosts.size()));
    EXPECT_TRUE(SameHostHolders(hosts, ring).empty());
    EXPECT_EQ(SnapshotRing(hosts), ring);  // every rank computes the same
  }
}

TEST(SnapshotRing, AHostWithMostRanksHasTheFewestSameHostHolders) {
  // 3 of 4 on h0: some h0 rank must hand its snapshot to another h0 rank;
  // a ring can do no better than 2m - n = 2 such ranks, and then losing h0
  // loses those ranks' snapshots (the job falls back to the disk
  // checkpoint), while losing h1 loses none.
  const std::vector<std::string> hosts = {"h0", "h0", "h1", "h0"};
  const std::vector<int> ring = SnapshotRing(hosts);
  ExpectPermutation(ring, 4);
  EXPECT_EQ(SameHostHolders(hosts, ring).size(), 2u);
  EXPECT_NE(hosts[RingNext(ring, 2)], "h1");
  const std::vector<std::string> five = {"a", "a", "a", "a", "a", "b", "c"};
  EXPECT_EQ(SameHostHolders(five, SnapshotRing(five)).size(), 3u);  // 2 * 5 - 7
}

std::string Text(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// One blob "p<r>@<step>" named p<r>.
void Snapshot(SnapshotExchange& x, int r, int64_t step) {
  const std::string name = absl::StrCat("p", r);
  const std::string value = absl::StrCat(name, "@", step);
  const std::map<std::string, size_t> sizes = {{name, value.size()}};
  absl::Status s = x.Round(step, PackSize(sizes), [&](StatePack& pack) {
    std::span<std::byte> out = StartPack(sizes, pack).at(name);
    std::memcpy(out.data(), value.data(), value.size());
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
}

TEST(SnapshotRing, ALostHostsRanksComeBackFromTheOtherHost) {
  const std::vector<std::string> hosts = {"h0", "h0", "h1", "h1"};
  std::vector<std::unique_ptr<SnapshotStore>> stores;
  for (int r = 0; r < 4; ++r) stores.push_back(std::make_unique<SnapshotStore>(1 << 20));
  OnRanks(4, [&](int r, Transport& t) {
    SnapshotExchange x(t, *stores[r],
                       {.world_devices = {"d0", "d1", "d2", "d3"}, .ring = SnapshotRing(hosts)});
    Snapshot(x, r, 1);
    Snapshot(x, r, 2);
    ASSERT_TRUE(x.Finish().ok());
  });
  // Rank 0 holds rank 3's state (ring 0 -> 2 -> 1 -> 3 -> 0), rank 1 rank 2's.
  EXPECT_EQ(Text(stores[0]->At(2).at("p3")), "p3@2");
  EXPECT_EQ(Text(stores[1]->At(2).at("p2")), "p2@2");
  // h1 (ranks 2 and 3) is lost: the survivors restore step 2 in full.
  const std::vector<std::string> names = {"p0", "p1", "p2", "p3"};
  OnRanks(2, [&](int r, Transport& t) {
    auto choice = AgreeOnSnapshot(t, *stores[r], names, 7, absl::Seconds(10));
    ASSERT_TRUE(choice.ok()) << choice.status();
    ASSERT_TRUE(choice->has_value());
    EXPECT_EQ((*choice)->step, 2);
    const ParameterOwners to = {{"p0", {0}}, {"p1", {1}}, {"p2", {0}}, {"p3", {1}}};
    auto moved = MoveState(t, (*choice)->mine, (*choice)->from, to, 7, absl::Seconds(10));
    ASSERT_TRUE(moved.ok()) << moved.status();
    EXPECT_EQ(Text(ViewsOf(*moved).at(r == 0 ? "p2" : "p3")), r == 0 ? "p2@2" : "p3@2");
  });
}

}  // namespace
}  // namespace pipeplan::worker
