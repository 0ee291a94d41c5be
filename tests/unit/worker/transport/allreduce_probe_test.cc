// The all-reduce probe: every rank times the same ring all-reduce, the
// values it sums are its own, and what it cannot probe it refuses.
#include "pipeplan/worker/transport/allreduce_probe.h"

#include <vector>

#include "gtest/gtest.h"
#include "on_ranks.h"
#include "pipeplan/worker/transport/collectives.h"

namespace pipeplan::worker {
namespace {

TEST(AllReduceProbe, EveryRankTimesTheSameRing) {
  constexpr int kRanks = 3;
  std::vector<absl::StatusOr<AllReduceProbe>> got(kRanks, absl::UnknownError("not run"));
  std::vector<std::vector<float>> after(kRanks);
  OnRanks(kRanks, [&](int r, Transport& t) {
    got[r] = ProbeAllReduce(t, 1 << 20, /*epoch=*/7, absl::Seconds(30));
    // A step's first bucket of the same epoch still meets only its own
    // messages: the probe's calls sit apart.
    std::vector<float> v(5, static_cast<float>(r));
    ASSERT_TRUE(RingAllReduceSum(t, v, /*epoch=*/7, absl::Seconds(30), /*call=*/0).ok());
    after[r] = v;
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status();
    EXPECT_EQ(got[r]->bytes, 1 << 20);
    EXPECT_GT(got[r]->seconds, 0);
    EXPECT_EQ(after[r], std::vector<float>(5, 0.0f + 1.0f + 2.0f));
  }
}

TEST(AllReduceProbe, RoundsToWholeValues) {
  std::vector<double> bytes(2);
  OnRanks(2, [&](int r, Transport& t) {
    absl::StatusOr<AllReduceProbe> p = ProbeAllReduce(t, 4099, 1, absl::Seconds(30));
    ASSERT_TRUE(p.ok()) << p.status();
    bytes[r] = p->bytes;
  });
  EXPECT_EQ(bytes, std::vector<double>(2, 4096));
}

TEST(AllReduceProbe, RefusesWhatItCannotProbe) {
  OnRanks(1, [&](int, Transport& t) {
    EXPECT_EQ(ProbeAllReduce(t, 1 << 20, 1, absl::Seconds(1)).status().code(),
              absl::StatusCode::kInvalidArgument);
  });
  OnRanks(2, [&](int, Transport& t) {
    EXPECT_EQ(ProbeAllReduce(t, 3, 1, absl::Seconds(1)).status().code(),
              absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace pipeplan::worker
