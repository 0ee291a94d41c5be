// In-memory peer snapshots and the raw state formats, torch-free: tensor
// records and state packs (layout, reuse, corrupt input), the snapshot
// store's slots and memory limit, snapshot rounds over the in-memory
// transport, and the restore agreement after a lost rank (its state from
// the peer that held it; nothing when the holder is lost too).
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "on_ranks.h"
#include "pipeplan/worker/package/state_pack.h"
#include "pipeplan/worker/package/state_transfer.h"
#include "pipeplan/worker/package/tensor_record.h"
#include "pipeplan/worker/snapshot/snapshot_exchange.h"
#include "pipeplan/worker/snapshot/snapshot_restore.h"
#include "pipeplan/worker/snapshot/snapshot_store.h"
#include "pipeplan/worker/transport/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

using ::testing::HasSubstr;

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }
std::string Text(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

TEST(TensorRecord, RoundTripsRawBytesAligned) {
  const std::vector<TensorMeta> metas = {{"param", 6, 4, {2, 3}}, {"step", 4, 8, {}}};
  const RecordLayout layout = LayOutRecord("adamw", metas);
  std::vector<std::byte> record(layout.total);
  WriteRecordHeader("adamw", metas, layout, record);
  const float values[6] = {1, 2, 3, 4, 5, 6};
  const int64_t step = 7;
  std::memcpy(record.data() + layout.offsets[0], values, sizeof(values));
  std::memcpy(record.data() + layout.offsets[1], &step, sizeof(step));
  for (size_t off : layout.offsets) EXPECT_EQ(off % 64, 0u);

  auto parsed = ParseRecord(record);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->label, "adamw");
  ASSERT_EQ(parsed->tensors.size(), 2u);
  EXPECT_EQ(parsed->tensors[0].meta.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(parsed->tensors[0].data.data(), values, sizeof(values)), 0);
  EXPECT_EQ(parsed->tensors[1].data.size(), 8u);

  // Cut short: the tensor's bytes run past the end.
  auto cut = ParseRecord(std::span(record).first(layout.offsets[1] + 4));
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cut.status().message()), HasSubstr("\"step\""));
  EXPECT_EQ(ParseRecord(Bytes("not a record")).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatePack, BuildsInPlaceAndReusesItsMemory) {
  StatePack pack;
  auto spans = StartPack({{"a", 3}, {"b", 100}}, pack);
  std::memcpy(spans["a"].data(), "AAA", 3);
  std::memset(spans["b"].data(), 'b', 100);
  EXPECT_EQ(pack.bytes.size(), PackSize({{"a", 3}, {"b", 100}}));
  auto views = ParseStatePack(pack.bytes);
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_EQ(Text(views->at("a")), "AAA");
  EXPECT_EQ(Text(views->at("b")), std::string(100, 'b'));
  EXPECT_EQ(pack.views.at("a").data(), views->at("a").data());
  // The next round of the same size writes into the same memory.
  const std::byte* before = pack.bytes.data();
  StartPack({{"a", 3}, {"b", 100}}, pack);
  EXPECT_EQ(pack.bytes.data(), before);

  std::vector<std::byte> cut(pack.bytes.begin(), pack.bytes.end() - 80);
  EXPECT_EQ(ParseStatePack(cut).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(LooksLikeStatePack(Bytes("PK\x03\x04 a zip")));
}

// Fills `pack` with one blob per name, each "<name>@<step>".
absl::Status Export(StatePack& pack, const std::vector<std::string>& names, int64_t step) {
  std::map<std::string, size_t> sizes;
  for (const auto& n : names) sizes[n] = absl::StrCat(n, "@", step).size();
  for (auto& [name, span] : StartPack(sizes, pack)) {
    const std::string v = absl::StrCat(name, "@", step);
    std::memcpy(span.data(), v.data(), v.size());
  }
  return absl::OkStatus();
}

size_t ExportSize(const std::vector<std::string>& names, int64_t step) {
  std::map<std::string, size_t> sizes;
  for (const auto& n : names) sizes[n] = absl::StrCat(n, "@", step).size();
  return PackSize(sizes);
}

TEST(SnapshotStore, KeepsTwoOfEachAndRefusesPastItsLimit) {
  SnapshotStore store(4096);
  for (int64_t step : {1, 2, 3}) {
    auto own = store.ReserveOwn(step, ExportSize({"w"}, step));
    ASSERT_TRUE(own.ok()) << own.status();
    ASSERT_TRUE(Export(**own, {"w"}, step).ok());
    store.CommitOwn(step);
  }
  EXPECT_EQ(store.NewestStep(), 3);
  EXPECT_EQ(store.NewestStepBelow(3), 2);
  EXPECT_EQ(store.NewestStepBelow(2), std::nullopt);  // step 1's slot was reused
  EXPECT_EQ(Text(store.At(3).at("w")), "w@3");
  EXPECT_TRUE(store.Holds(2, "w"));
  EXPECT_FALSE(store.Holds(2, "v"));

  auto held = store.ReserveHeld("cpu1", 4, 8000);
  EXPECT_EQ(held.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(held.status().message()), HasSubstr("--snapshot-memory-limit-mb"));
  // An arriving snapshot is not readable until it completes.
  auto arriving = store.ReserveHeld("cpu1", 4, 10);
  ASSERT_TRUE(arriving.ok());
  EXPECT_FALSE(store.Holds(4, "w"));
  EXPECT_EQ(store.CompleteHeld(4).code(), absl::StatusCode::kInvalidArgument);  // not a pack
  EXPECT_EQ(store.NewestStep(), 3);
  EXPECT_LE(store.bytes(), store.limit_bytes());
}

// Three ranks, a round after steps 1, 2 and 3: each holds its own state at
// the last two steps and its predecessor's at step 2 (3 is in flight until
// the next round or Finish).
TEST(SnapshotExchange, EachRankHoldsItsPredecessorsState) {
  std::vector<std::unique_ptr<SnapshotStore>> stores;
  for (int r = 0; r < 3; ++r) stores.push_back(std::make_unique<SnapshotStore>(1 << 20));
  OnRanks(3, [&](int r, Transport& t) {
    SnapshotExchange x(t, *stores[r], {.world_devices = {"d0", "d1", "d2"}});
    const std::vector<std::string> names = {absl::StrCat("p", r)};
    for (int64_t step : {1, 2, 3}) {
      SnapshotRoundCost cost;
      absl::Status s = x.Round(
          step, ExportSize(names, step), [&](StatePack& p) { return Export(p, names, step); },
          &cost);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_FALSE(cost.skipped);
    }
    const std::string prev = absl::StrCat("p", (r + 2) % 3);
    EXPECT_TRUE(stores[r]->Holds(2, prev));
    // Finish waits for step 3's transfer; Settle would drop it when the
    // predecessor has not sent it yet (the ranks are threads that race).
    ASSERT_TRUE(x.Finish().ok());
    EXPECT_EQ(Text(stores[r]->At(3).at(prev)), prev + "@3");
    EXPECT_EQ(Text(stores[r]->At(3).at(absl::StrCat("p", r))), absl::StrCat("p", r, "@3"));
  });
}

TEST(SnapshotExchange, ARoundThatDoesNotFitIsSkippedByEveryone) {
  std::vector<std::unique_ptr<SnapshotStore>> stores;
  for (int r = 0; r < 3; ++r)
    stores.push_back(std::make_unique<SnapshotStore>(r == 1 ? 100 : 1 << 20));
  std::vector<absl::Status> got(3);
  OnRanks(3, [&](int r, Transport& t) {
    SnapshotExchange x(t, *stores[r], {.world_devices = {"d0", "d1", "d2"}});
    const std::vector<std::string> names = {absl::StrCat("p", r)};
    got[r] = x.Round(1, ExportSize(names, 1), [&](StatePack& p) { return Export(p, names, 1); });
  });
  EXPECT_TRUE(got[0].ok()) << got[0];
  EXPECT_EQ(got[1].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(got[2].ok()) << got[2];
  EXPECT_FALSE(stores[2]->Holds(1, "p1"));  // rank 1 sent nothing
  EXPECT_FALSE(stores[1]->Holds(1, "p0"));  // nor took anything
}

// Four ranks snapshot at steps 1 and 2; rank `lost` (and, optionally, the
// rank after it: its holder) is gone. The survivors agree on a step over a
// new transport and move every record to its new owner.
std::vector<std::optional<SnapshotChoice>> LoseRanks(const std::vector<int>& lost,
                                                     std::vector<NamedState>* moved) {
  std::vector<std::unique_ptr<SnapshotStore>> stores;
  for (int r = 0; r < 4; ++r) stores.push_back(std::make_unique<SnapshotStore>(1 << 20));
  OnRanks(4, [&](int r, Transport& t) {
    SnapshotExchange x(t, *stores[r], {.world_devices = {"d0", "d1", "d2", "d3"}});
    const std::vector<std::string> names = {absl::StrCat("p", r)};
    for (int64_t step : {1, 2}) {
      ASSERT_TRUE(x.Round(step, ExportSize(names, step), [&](StatePack& p) {
                     return Export(p, names, step);
                   }).ok());
    }
    // Step 2's transfer completes before the loss. Without the wait it is
    // in flight when the exchange goes, and whether the predecessor's
    // thread sent it by then is a race: some holders would keep step 2,
    // others drop it, and the survivors agree on step 1.
    ASSERT_TRUE(x.Finish().ok());
  });
  std::vector<int> survivors;
  for (int r = 0; r < 4; ++r) {
    if (std::find(lost.begin(), lost.end(), r) == lost.end()) survivors.push_back(r);
  }
  const int n = static_cast<int>(survivors.size());
  std::vector<std::optional<SnapshotChoice>> out(n);
  moved->assign(n, {});
  OnRanks(n, [&](int r, Transport& t) {
    auto choice =
        AgreeOnSnapshot(t, *stores[survivors[r]], {"p0", "p1", "p2", "p3"}, 5, absl::Seconds(10));
    ASSERT_TRUE(choice.ok()) << choice.status();
    out[r] = *choice;
    if (!*choice) return;
    // New owners: p0..p3 on new ranks 0, 0, 1, n - 1.
    const ParameterOwners to = {{"p0", {0}}, {"p1", {0}}, {"p2", {1}}, {"p3", {n - 1}}};
    auto got = MoveState(t, (*choice)->mine, (*choice)->from, to, 5, absl::Seconds(10));
    ASSERT_TRUE(got.ok()) << got.status();
    (*moved)[r] = *std::move(got);
  });
  return out;
}

TEST(SnapshotRestore, ALostRanksStateComesFromItsHolder) {
  std::vector<NamedState> moved;
  const auto choices = LoseRanks({2}, &moved);
  for (const auto& c : choices) {
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->step, 2);
    EXPECT_EQ(c->from.at("p2"), std::vector<int>{2});  // old rank 3, new rank 2
  }
  EXPECT_EQ(Text(ViewsOf(moved[1]).at("p2")), "p2@2");
  EXPECT_EQ(Text(ViewsOf(moved[0]).at("p1")), "p1@2");
}

TEST(SnapshotRestore, NothingWhenARankAndItsHolderAreBothLost) {
  std::vector<NamedState> moved;
  for (const auto& c : LoseRanks({2, 3}, &moved)) EXPECT_FALSE(c.has_value());
}

}  // namespace
}  // namespace pipeplan::worker
