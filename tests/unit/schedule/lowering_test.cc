#include "pipeplan/core/schedule/lowering.h"

#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/validate.h"
#include "test_util.h"

namespace pipeplan::schedule {
namespace {

using testing::MakeSchedule;
using testing::ProgramString;

// PyTorch's own test vector for _add_send_recv.
TEST(InsertSendRecvTest, MatchesPyTorchTestVector) {
  const PipelineSchedule compute =
      MakeSchedule({0, 1}, 2, {"0F0,0F1,_,0B0,_,0B1", "_,1F0,1B0,1F1,1B1,_"});
  absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(compute);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_EQ(ProgramString(lowered->programs[0]),
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1");
  EXPECT_EQ(ProgramString(lowered->programs[1]),
            "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1");
  EXPECT_TRUE(ValidateSchedule(*lowered).ok());
}

TEST(InsertSendRecvTest, RejectsLoweredInput) {
  const PipelineSchedule lowered = MakeSchedule({0, 1}, 1, {"0F0,0SEND_F0", "1RECV_F0,1F0"});
  EXPECT_FALSE(InsertSendRecv(lowered).ok());
}

TEST(InsertSendRecvTest, ReportsScheduleThatCannotComplete) {
  // Rank 0 wants the gradient of microbatch 0 before producing its forward.
  const PipelineSchedule bad = MakeSchedule({0, 1}, 1, {"0B0,0F0", "1F0,1B0"});
  absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(bad);
  ASSERT_FALSE(lowered.ok());
  EXPECT_NE(lowered.status().message().find("rank 0 step 0 (0B0) can never run"), std::string::npos)
      << lowered.status();
}

TEST(InsertSendRecvTest, EveryBuiltInScheduleLowersToAValidSchedule) {
  for (ScheduleKind kind : kAllScheduleKinds) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {1, 2, 4, 6, 8}) {
        for (int v : {1, 2, 3}) {
          absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, p, m, v);
          if (!s.ok()) continue;
          absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*s);
          ASSERT_TRUE(lowered.ok()) << ScheduleKindName(kind) << " " << lowered.status();
          EXPECT_TRUE(ValidateSchedule(*lowered).ok())
              << ScheduleKindName(kind) << " p=" << p << " m=" << m << " v=" << v;
        }
      }
    }
  }
}

// In the V shape the last rank holds stages p-1 and p; that hop is local.
TEST(InsertSendRecvTest, VShapeHasNoCommunicationBetweenTheLastRanksTwoStages) {
  for (ScheduleKind kind : {ScheduleKind::kZBVZeroBubble, ScheduleKind::kDualPipeV}) {
    const int p = 4;
    absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, p, 8, 2);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->stage_to_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
    absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*s);
    ASSERT_TRUE(lowered.ok());
    int sends = 0;
    for (int r = 0; r < p; ++r) {
      for (const auto& a : lowered->programs[r]) {
        if (!a || IsCompute(a->type)) continue;
        ++sends;
        const bool touches_middle = (a->type == ActionType::kSendF && a->stage == p - 1) ||
                                    (a->type == ActionType::kRecvF && a->stage == p) ||
                                    (a->type == ActionType::kSendB && a->stage == p) ||
                                    (a->type == ActionType::kRecvB && a->stage == p - 1);
        EXPECT_FALSE(touches_middle) << ScheduleKindName(kind) << " rank " << r << ": " << *a;
      }
    }
    // 2p-1 boundaries, p-1... all but the middle one cross ranks: 2 actions each way.
    EXPECT_EQ(sends, (2 * p - 2) * 8 * 4) << ScheduleKindName(kind);
  }
}

TEST(MergeBackwardTest, MergesAdjacentInputAndWeightOfTheSameMicrobatch) {
  const PipelineSchedule s = MakeSchedule({0}, 3, {"0F0,0F1,0F2,0I0,_,0W0,0I1,0I2,0W2,0W1"});
  absl::StatusOr<PipelineSchedule> merged = MergeBackward(s);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(ProgramString(merged->programs[0]), "0F0,0F1,0F2,0B0,0I1,0B2,0W1");
}

// The buffer-reusing overloads give what the allocating ones give, whatever
// the target held before.
TEST(InsertSendRecvTest, ReusingOverloadsMatch) {
  PipelineSchedule compute, lowered;
  for (ScheduleKind kind : kAllScheduleKinds) {
    for (auto [p, m] : {std::pair{4, 8}, {2, 4}, {3, 6}}) {
      ASSERT_TRUE(BuildSchedule(kind, p, m, 2, &compute).ok());
      absl::StatusOr<PipelineSchedule> fresh = BuildSchedule(kind, p, m, 2);
      ASSERT_TRUE(fresh.ok());
      EXPECT_EQ(compute.programs, fresh->programs);
      EXPECT_EQ(compute.stage_to_rank, fresh->stage_to_rank);
      ASSERT_TRUE(InsertSendRecv(compute, &lowered).ok());
      absl::StatusOr<PipelineSchedule> fresh_lowered = InsertSendRecv(*fresh);
      ASSERT_TRUE(fresh_lowered.ok());
      EXPECT_EQ(lowered.programs, fresh_lowered->programs);
      EXPECT_EQ(lowered.num_stages, fresh_lowered->num_stages);
    }
  }
  EXPECT_FALSE(InsertSendRecv(compute, &compute).ok());
}

}  // namespace
}  // namespace pipeplan::schedule
