#include "pipeplan/core/schedule/simulator.h"

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "test_util.h"

namespace pipeplan::schedule {
namespace {

using ::testing::HasSubstr;

SimulationResult SimulateBuilt(ScheduleKind kind, int p, int m, int v, double f, double i, double w,
                               bool lower = true) {
  absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, p, m, v);
  EXPECT_TRUE(s.ok()) << s.status();
  if (lower) {
    absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*s);
    EXPECT_TRUE(lowered.ok());
    s = std::move(lowered);
  }
  absl::StatusOr<SimulationResult> r = Simulate(*s, StageCosts::Uniform(s->num_stages, f, i, w));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimulationResult{};
}

TEST(SimulatorTest, GPipeAnd1F1BBubbleMatchesClosedForm) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 12; ++m) {
        const SimulationResult r = SimulateBuilt(kind, p, m, 1, 1.0, 1.0, 1.0);
        EXPECT_NEAR(r.bubble_ratio, double(p - 1) / (m + p - 1), 1e-12)
            << ScheduleKindName(kind) << " p=" << p << " m=" << m;
        EXPECT_NEAR(r.step_seconds, 3.0 * (m + p - 1), 1e-9);
      }
    }
  }
}

// Same total work per rank: v chunks of a third of the time each.
TEST(SimulatorTest, InterleavedBubbleMatchesClosedForm) {
  for (int p : {2, 4, 8}) {
    for (int v : {2, 4}) {
      for (int m : {p, 2 * p, 4 * p}) {
        const SimulationResult r =
            SimulateBuilt(ScheduleKind::kInterleaved1F1B, p, m, v, 1.0 / v, 1.0 / v, 1.0 / v);
        EXPECT_NEAR(r.bubble_ratio, double(p - 1) / (v * m + p - 1), 1e-9)
            << "p=" << p << " m=" << m << " v=" << v;
      }
    }
  }
}

TEST(SimulatorTest, OneFOneBHoldsAtMostPMicrobatchesOnRankZeroWhereGPipeHoldsM) {
  const int p = 4, m = 16;
  EXPECT_EQ(SimulateBuilt(ScheduleKind::k1F1B, p, m, 1, 1, 1, 1).peak_inflight_microbatches[0], p);
  EXPECT_EQ(SimulateBuilt(ScheduleKind::kGPipe, p, m, 1, 1, 1, 1).peak_inflight_microbatches[0], m);
}

TEST(SimulatorTest, ZeroBubbleH1BeatsOneFOneBWhenWeightGradIsSplitOut) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p}) {
      const SimulationResult zb =
          SimulateBuilt(ScheduleKind::kInterleavedZeroBubble, p, m, 1, 1.0, 1.0, 1.0);
      const SimulationResult ofob = SimulateBuilt(ScheduleKind::k1F1B, p, m, 1, 1.0, 1.0, 1.0);
      EXPECT_LT(zb.bubble_ratio, ofob.bubble_ratio) << "p=" << p << " m=" << m;
      EXPECT_LT(zb.step_seconds, ofob.step_seconds);
    }
  }
}

TEST(SimulatorTest, MemoryIsParamsPlusInflightActivations) {
  absl::StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::kInterleaved1F1B, 2, 4, 2);
  ASSERT_TRUE(s.ok());
  StageCosts costs = StageCosts::Uniform(4, 1, 1, 1);
  costs.param_bytes = {100, 200, 300, 400};
  costs.activation_bytes = {1, 2, 3, 4};
  absl::StatusOr<SimulationResult> r = Simulate(*s, costs);
  ASSERT_TRUE(r.ok());
  // Rank 0 (stages 0, 2) runs 0F0,0F1,2F0,2F1,0F2,2B0,0F3,...: at the peak it
  // holds microbatches 0-2 of stage 0 and 0-1 of stage 2 (see build_test).
  EXPECT_EQ(r->peak_inflight_microbatches[0], 5);
  EXPECT_DOUBLE_EQ(r->peak_memory_bytes[0], 100 + 300 + 3 * 1 + 2 * 3);
}

// With free communication the SEND/RECV placement cannot matter. With real
// transfers a lowered schedule can only be slower: its RECV is posted where
// the program says (rendezvous), while compute-only simulation posts it early.
TEST(SimulatorTest, LoweringCostsNothingWithFreeCommunicationAndNeverHelps) {
  for (ScheduleKind kind : kAllScheduleKinds) {
    absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, 4, 8, 2);
    ASSERT_TRUE(s.ok());
    absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*s);
    ASSERT_TRUE(lowered.ok());
    StageCosts costs = StageCosts::Uniform(s->num_stages, 1.0, 1.5, 0.7);
    absl::StatusOr<SimulationResult> a = Simulate(*s, costs);
    absl::StatusOr<SimulationResult> b = Simulate(*lowered, costs);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NEAR(a->step_seconds, b->step_seconds, 1e-9) << ScheduleKindName(kind);
    const double free_step = a->step_seconds;
    costs.forward_transfer.assign(s->num_stages - 1, 0.3);
    costs.backward_transfer.assign(s->num_stages - 1, 0.2);
    a = Simulate(*s, costs);
    b = Simulate(*lowered, costs);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_GE(b->step_seconds, a->step_seconds - 1e-9) << ScheduleKindName(kind);
    EXPECT_GT(a->step_seconds, free_step) << ScheduleKindName(kind);
  }
}

TEST(SimulatorTest, TransfersDelayTheConsumer) {
  const PipelineSchedule s =
      testing::MakeSchedule({0, 1}, 1, {"0F0,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0"});
  StageCosts costs = StageCosts::Uniform(2, 1, 1, 1);
  costs.forward_transfer = {0.5};
  costs.backward_transfer = {0.25};
  absl::StatusOr<SimulationResult> r = Simulate(s, costs);
  ASSERT_TRUE(r.ok());
  // F0 [0,1], transfer to 1.5, 1F0 [1.5,2.5], 1B0 [2.5,4.5], transfer to 4.75, 0B0 to 6.75.
  EXPECT_DOUBLE_EQ(r->step_seconds, 6.75);
  EXPECT_DOUBLE_EQ(r->busy_seconds[0], 3);
  EXPECT_DOUBLE_EQ(r->idle_seconds[1], 3.75);
}

TEST(SimulatorTest, PostingAMessageHoldsTheRankButIsNotCompute) {
  const PipelineSchedule s =
      testing::MakeSchedule({0, 1}, 1, {"0F0,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0"});
  StageCosts costs = StageCosts::Uniform(2, 1, 1, 1);
  costs.forward_transfer = {0.5};
  costs.backward_transfer = {0.25};
  costs.send_host = {0.5, 2};
  costs.recv_host = {0.5, 2};
  absl::StatusOr<SimulationResult> r = Simulate(s, costs);
  ASSERT_TRUE(r.ok()) << r.status();
  // Rank 1 posts RECV_F0 until 2, so 1F0 [2,3] (not [1.5,2.5]), 1B0 [3,5],
  // SEND_B0 at 5 lands at 5.25 and holds rank 1 to 7; rank 0 runs 0B0
  // [5.25,7.25].
  EXPECT_DOUBLE_EQ(r->step_seconds, 7.25);
  EXPECT_DOUBLE_EQ(r->busy_seconds[0], 3);
  EXPECT_DOUBLE_EQ(r->idle_seconds[1], 4.25);
  costs.send_host = {1};
  EXPECT_THAT(std::string(Simulate(s, costs).status().message()),
              HasSubstr("send_host has 1 entries, want 2"));
}

TEST(SimulatorTest, SendAndRecvPostingAreChargedApart) {
  const PipelineSchedule s =
      testing::MakeSchedule({0, 1}, 1, {"0F0,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0"});
  StageCosts costs = StageCosts::Uniform(2, 1, 1, 1);
  costs.forward_transfer = {0.5};
  costs.backward_transfer = {0.25};
  costs.send_host = {0.5, 0.75};
  costs.recv_host = {0, 0};
  absl::StatusOr<SimulationResult> r = Simulate(s, costs);
  ASSERT_TRUE(r.ok()) << r.status();
  // 0F0 [0,1], SEND_F0 posted at 1 (lands 1.5) holds rank 0 to 1.5; RECVs
  // cost nothing: 1F0 [1.5,2.5], 1B0 [2.5,4.5], SEND_B0 at 4.5 lands at
  // 4.75 and holds rank 1 to 5.25; 0B0 [4.75,6.75].
  EXPECT_DOUBLE_EQ(r->step_seconds, 6.75);
  EXPECT_DOUBLE_EQ(r->finish_seconds[1], 5.25);
  // A RECV's own posting cost: rank 0 posts RECV_B0 from 1.5 to 5.5, so
  // 0B0 runs [5.5,7.5] though the gradient landed at 4.75.
  costs.recv_host = {4, 0};
  r = Simulate(s, costs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->step_seconds, 7.5);
  EXPECT_DOUBLE_EQ(r->finish_seconds[1], 5.25);
}

TEST(SimulatorTest, RejectsBadCostsAndBrokenSchedules) {
  absl::StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::k1F1B, 2, 2, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(std::string(Simulate(*s, StageCosts::Uniform(3, 1, 1, 1)).status().message()),
              HasSubstr("forward has 3 entries, want 2"));
  StageCosts negative = StageCosts::Uniform(2, 1, 1, 1);
  negative.backward_weight[1] = -1;
  EXPECT_FALSE(Simulate(*s, negative).ok());
  const PipelineSchedule dead = testing::MakeSchedule({0}, 1, {"0B0,0F0"});
  EXPECT_THAT(std::string(Simulate(dead, StageCosts::Uniform(1, 1, 1, 1)).status().message()),
              HasSubstr("rank 0 step 0 (0B0) can never run"));
}

TEST(SimulatorTest, FormatsATimeline) {
  absl::StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::k1F1B, 2, 2, 1);
  absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*s);
  SimulateOptions options;
  options.record_timeline = true;
  absl::StatusOr<SimulationResult> r = Simulate(*lowered, StageCosts::Uniform(2, 1, 1, 1), options);
  ASSERT_TRUE(r.ok());
  const std::string text = FormatTimeline(*r, 2);
  EXPECT_THAT(text, HasSubstr("Step 00 [t=0.000000]: 0F0"));
  EXPECT_THAT(text, HasSubstr("Step 01 [t=1.000000]: 0SEND_F0+0F1      1F0\n"));
  EXPECT_THAT(text, HasSubstr("Step 04 [t=5.000000]: -                 1B1\n"));
}

// Random stage and transfer times over every schedule family: compute on a
// rank never overlaps and no RECV completes before its SEND plus the transfer.
TEST(SimulatorTest, PropertyRanksAreSerialAndRecvsWaitForSends) {
  std::mt19937 rng(12345);
  for (int seed = 0; seed < 300; ++seed) {
    const ScheduleKind kind = kAllScheduleKinds[seed % kAllScheduleKinds.size()];
    const int p = 1 + static_cast<int>(rng() % 4);
    const int v = 1 + static_cast<int>(rng() % 3);
    const int m = (kind == ScheduleKind::kDualPipeV ? 2 * p : 1) + static_cast<int>(rng() % 6);
    absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, p, m, v);
    if (!s.ok()) continue;  // e.g. interleaved m not divisible into rounds
    absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*s);
    ASSERT_TRUE(lowered.ok());
    const StageCosts costs = testing::RandomTimes(s->num_stages, rng, 0.1, 3.0);
    SimulateOptions options;
    options.record_timeline = true;
    absl::StatusOr<SimulationResult> r = Simulate(*lowered, costs, options);
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<std::vector<std::pair<double, double>>> compute(p);
    std::map<std::tuple<bool, int, int>, double> send_ready;  // (fwd, boundary, mb)
    for (const TimelineEvent& e : r->timeline) {
      if (IsCompute(e.action.type)) compute[e.rank].push_back({e.start, e.end});
      if (e.action.type == ActionType::kSendF) {
        send_ready[{true, e.action.stage, e.action.microbatch}] = e.end;
      } else if (e.action.type == ActionType::kSendB) {
        send_ready[{false, e.action.stage - 1, e.action.microbatch}] = e.end;
      }
    }
    for (const TimelineEvent& e : r->timeline) {
      if (e.action.type != ActionType::kRecvF && e.action.type != ActionType::kRecvB) continue;
      const bool fwd = e.action.type == ActionType::kRecvF;
      const auto key =
          std::make_tuple(fwd, fwd ? e.action.stage - 1 : e.action.stage, e.action.microbatch);
      ASSERT_TRUE(send_ready.count(key)) << ActionToString(e.action);
      EXPECT_GE(e.end, send_ready[key] - 1e-9) << ActionToString(e.action) << " seed " << seed;
      EXPECT_LE(e.end, r->step_seconds + 1e-9);
    }
    for (int rank = 0; rank < p; ++rank) {
      std::sort(compute[rank].begin(), compute[rank].end());
      double busy = 0;
      for (size_t i = 0; i < compute[rank].size(); ++i) {
        busy += compute[rank][i].second - compute[rank][i].first;
        if (i > 0) {
          EXPECT_GE(compute[rank][i].first, compute[rank][i - 1].second - 1e-9)
              << ScheduleKindName(kind) << " seed " << seed << " rank " << rank;
        }
      }
      EXPECT_NEAR(busy, r->busy_seconds[rank], 1e-6);
      EXPECT_LE(r->busy_seconds[rank], r->step_seconds + 1e-9);
    }
    EXPECT_GE(r->bubble_ratio, 0);
    EXPECT_LT(r->bubble_ratio, 1);
  }
}

// Simulate has a fused fast path (no timeline) and the checked path it falls
// back to (taken whenever a timeline is recorded). They must agree exactly,
// on valid schedules and on the errors of broken ones.
TEST(SimulatorTest, FastPathMatchesCheckedPath) {
  std::mt19937 rng(7);
  auto expect_same = [](const PipelineSchedule& s, const StageCosts& costs,
                        const std::string& what) {
    SimulateOptions with_timeline;
    with_timeline.record_timeline = true;
    absl::StatusOr<SimulationResult> fast = Simulate(s, costs);
    absl::StatusOr<SimulationResult> checked = Simulate(s, costs, with_timeline);
    ASSERT_EQ(fast.ok(), checked.ok())
        << what << ": " << fast.status() << " vs " << checked.status();
    if (!fast.ok()) {
      EXPECT_EQ(fast.status(), checked.status()) << what;
      return;
    }
    EXPECT_EQ(fast->step_seconds, checked->step_seconds) << what;
    EXPECT_EQ(fast->bubble_ratio, checked->bubble_ratio) << what;
    EXPECT_EQ(fast->busy_seconds, checked->busy_seconds) << what;
    EXPECT_EQ(fast->idle_seconds, checked->idle_seconds) << what;
    EXPECT_EQ(fast->peak_inflight_microbatches, checked->peak_inflight_microbatches) << what;
    EXPECT_EQ(fast->peak_inflight_per_stage, checked->peak_inflight_per_stage) << what;
    EXPECT_EQ(fast->peak_memory_bytes, checked->peak_memory_bytes) << what;
    EXPECT_TRUE(fast->timeline.empty());
  };
  for (ScheduleKind kind : kAllScheduleKinds) {
    for (auto [p, m, v] : {std::tuple{1, 2, 2}, {2, 4, 2}, {3, 6, 2}, {4, 8, 3}, {4, 16, 2}}) {
      absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, p, m, v);
      ASSERT_TRUE(s.ok()) << s.status();
      absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*s);
      ASSERT_TRUE(lowered.ok()) << lowered.status();
      StageCosts costs = StageCosts::Uniform(s->num_stages, 1, 1, 1);
      std::uniform_real_distribution<double> time(0.1, 2.0);
      for (int st = 0; st < s->num_stages; ++st) {
        costs.forward[st] = time(rng);
        costs.backward_input[st] = time(rng);
        costs.backward_weight[st] = time(rng);
      }
      costs.param_bytes.assign(s->num_stages, 5);
      costs.activation_bytes.assign(s->num_stages, 3);
      costs.forward_transfer.assign(s->num_stages - 1, 0.25);
      costs.backward_transfer.assign(s->num_stages - 1, 0.5);
      const std::string what =
          absl::StrCat(std::string(ScheduleKindName(kind)), " p=", p, " m=", m);
      expect_same(*s, costs, what + " compute-only");
      expect_same(*lowered, costs, what + " lowered");
      // Broken variants: drop, duplicate or swap one action of a rank.
      for (int trial = 0; trial < 20; ++trial) {
        PipelineSchedule broken = trial % 2 ? *lowered : *s;
        RankProgram& program = broken.programs[rng() % p];
        const size_t i = rng() % program.size(), j = rng() % program.size();
        switch (trial % 3) {
          case 0:
            program.erase(program.begin() + i);
            break;
          case 1:
            program.insert(program.begin() + i, program[j]);
            break;
          default:
            std::swap(program[i], program[j]);
        }
        expect_same(broken, costs, absl::StrCat(what, " broken #", trial));
      }
    }
  }
}

}  // namespace
}  // namespace pipeplan::schedule
