#include "pipeplan/core/schedule/build.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "pipeplan/core/schedule/validate.h"
#include "test_util.h"

namespace pipeplan::schedule {
namespace {

using testing::ProgramString;

std::vector<std::string> Programs(ScheduleKind kind, int p, int m, int v) {
  absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, p, m, v);
  EXPECT_TRUE(s.ok()) << s.status();
  std::vector<std::string> out;
  if (!s.ok()) return out;
  for (const RankProgram& program : s->programs) out.push_back(ProgramString(program));
  return out;
}

TEST(BuildScheduleTest, GPipe) {
  EXPECT_EQ(Programs(ScheduleKind::kGPipe, 2, 3, 1),
            (std::vector<std::string>{"0F0,0F1,0F2,0B0,0B1,0B2", "1F0,1F1,1F2,1B0,1B1,1B2"}));
}

// Schedule1F1B's runtime order: min(m, p - s) warm-up forwards, then B/F
// pairs, then the remaining backwards.
TEST(BuildScheduleTest, OneFOneB) {
  EXPECT_EQ(Programs(ScheduleKind::k1F1B, 3, 4, 1),
            (std::vector<std::string>{"0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3",
                                      "1F0,1F1,1B0,1F2,1B1,1F3,1B2,1B3",
                                      "2F0,2B0,2F1,2B1,2F2,2B2,2F3,2B3"}));
  // The PyTorch test vector's compute order (without its idle slots).
  EXPECT_EQ(Programs(ScheduleKind::k1F1B, 2, 2, 1),
            (std::vector<std::string>{"0F0,0F1,0B0,0B1", "1F0,1B0,1F1,1B1"}));
}

// Hand-derived from ScheduleInterleaved1F1B: 2 rounds of 2 microbatches, rank 0
// warms up with (v-1)*2 + 2*(p-1) = 4 forwards.
TEST(BuildScheduleTest, Interleaved1F1B) {
  EXPECT_EQ(Programs(ScheduleKind::kInterleaved1F1B, 2, 4, 2),
            (std::vector<std::string>{
                "0F0,0F1,2F0,2F1,0F2,2B0,0F3,2B1,2F2,0B0,2F3,0B1,2B2,2B3,0B2,0B3",
                "1F0,1F1,3F0,3B0,3F1,3B1,1F2,1B0,1F3,1B1,3F2,3B2,3F3,3B3,1B2,1B3"}));
}

TEST(BuildScheduleTest, LoopedBfs) {
  EXPECT_EQ(Programs(ScheduleKind::kLoopedBFS, 2, 2, 2),
            (std::vector<std::string>{"0F0,0F1,2F0,2F1,2B1,2B0,0B1,0B0",
                                      "1F0,1F1,3F0,3F1,3B1,3B0,1B1,1B0"}));
}

// ZB-H1 (one chunk): rank r delays each W by r ops.
TEST(BuildScheduleTest, ZeroBubbleH1) {
  EXPECT_EQ(Programs(ScheduleKind::kInterleavedZeroBubble, 3, 4, 1),
            (std::vector<std::string>{"0F0,0F1,0F2,0I0,0W0,0F3,0I1,0W1,0I2,0W2,0I3,0W3",
                                      "1F0,1F1,1I0,1F2,1I1,1W0,1F3,1I2,1W1,1I3,1W2,1W3",
                                      "2F0,2I0,2F1,2I1,2F2,2I2,2W0,2F3,2I3,2W1,2W2,2W3"}));
}

TEST(BuildScheduleTest, InterleavedZeroBubble) {
  EXPECT_EQ(Programs(ScheduleKind::kInterleavedZeroBubble, 2, 4, 2),
            (std::vector<std::string>{
                "0F0,0F1,2F0,2F1,2I0,2W0,0F2,2I1,2W1,0F3,0I0,0W0,2F2,0I1,0W1,2F3,2I2,2W2,2I3,"
                "2W3,0I2,0W2,0I3,0W3",
                "1F0,1F1,3F0,3I0,3F1,3I1,3W0,1F2,1I0,3W1,1F3,1I1,1W0,3F2,3I2,1W1,3F3,3I3,3W2,"
                "1I2,3W3,1I3,1W2,1W3"}));
}

TEST(BuildScheduleTest, ZbvZeroBubble) {
  EXPECT_EQ(Programs(ScheduleKind::kZBVZeroBubble, 2, 4, 1),
            (std::vector<std::string>{
                "0F0,0F1,0F2,3F0,3I0,3W0,3F1,3I1,3W1,0F3,0I0,0W0,3F2,3I2,3W2,0I1,0W1,3F3,3I3,"
                "3W3,0I2,0W2,0I3,0W3",
                "1F0,2F0,1F1,2F1,2I0,2W0,1F2,1I0,1W0,2F2,2I1,2W1,1F3,1I1,1W1,2F3,2I2,2W2,1I2,"
                "2I3,1I3,1W2,2W3,1W3"}));
}

// Hand-derived from ScheduleDualPipeV's eight phases for p = 2, m = 4.
TEST(BuildScheduleTest, DualPipeV) {
  EXPECT_EQ(Programs(ScheduleKind::kDualPipeV, 2, 4, 1),
            (std::vector<std::string>{
                "0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,3B2,"
                "(3F3;0B1)OVERLAP_F_B,3B3,0I2,0W2,0I3,0W3",
                "1F0,2F0,1F1,2F1,1F2,2B0,(2F2;1B0)OVERLAP_F_B,(1F3;2B1)OVERLAP_F_B,"
                "(2F3;1B1)OVERLAP_F_B,2B2,1B2,2I3,1I3,2W3,1W3"}));
}

TEST(BuildScheduleTest, StageToRankMappings) {
  absl::StatusOr<PipelineSchedule> looped = BuildSchedule(ScheduleKind::kInterleaved1F1B, 3, 6, 2);
  ASSERT_TRUE(looped.ok());
  EXPECT_EQ(looped->stage_to_rank, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  absl::StatusOr<PipelineSchedule> v = BuildSchedule(ScheduleKind::kZBVZeroBubble, 3, 6, 1);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->stage_to_rank, (std::vector<int>{0, 1, 2, 2, 1, 0}));
  EXPECT_EQ(v->num_stages, 6);
}

TEST(BuildScheduleTest, EveryMicrobatchOnEveryStageAndValid) {
  for (const testing::BuiltSchedule& b : testing::EveryBuildableSchedule()) {
    EXPECT_EQ(b.schedule.num_stages, b.ranks * StagesPerRank(b.kind, b.chunks));
    EXPECT_TRUE(ValidateSchedule(b.schedule).ok())
        << b.label << ": " << ValidateSchedule(b.schedule);
  }
}

TEST(BuildScheduleTest, RejectsImpossibleParameters) {
  EXPECT_FALSE(BuildSchedule(ScheduleKind::k1F1B, 0, 4, 1).ok());
  EXPECT_FALSE(BuildSchedule(ScheduleKind::kGPipe, 2, 0, 1).ok());
  EXPECT_FALSE(BuildSchedule(ScheduleKind::kInterleaved1F1B, 2, 4, 0).ok());
  absl::StatusOr<PipelineSchedule> dual = BuildSchedule(ScheduleKind::kDualPipeV, 4, 7, 1);
  ASSERT_FALSE(dual.ok());
  EXPECT_NE(dual.status().message().find("2 * ranks = 8"), std::string::npos);
  EXPECT_TRUE(BuildSchedule(ScheduleKind::kDualPipeV, 4, 8, 1).ok());
  // 10 microbatches on 4 ranks is 2 rounds of 5; 9 is not divisible by 2.
  EXPECT_TRUE(BuildSchedule(ScheduleKind::kInterleaved1F1B, 4, 10, 2).ok());
  absl::StatusOr<PipelineSchedule> odd = BuildSchedule(ScheduleKind::kInterleaved1F1B, 4, 9, 2);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("rounds"), std::string::npos);
}

TEST(BuildScheduleTest, RejectsMoreStagesThanSupported) {
  absl::StatusOr<PipelineSchedule> s =
      BuildSchedule(ScheduleKind::kInterleaved1F1B, kMaxStages / 2, 1, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("stages; at most"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace pipeplan::schedule
