#include "pipeplan/core/schedule/unit_time.h"

#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "test_util.h"

namespace pipeplan::schedule {
namespace {

using testing::MakeSchedule;

TEST(UnitTimeTest, MatchesPyTorchTestVector) {
  const PipelineSchedule compute =
      MakeSchedule({0, 1}, 2, {"0F0,0F1,_,0B0,_,0B1", "_,1F0,1B0,1F1,1B1,_"});
  absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(compute);
  ASSERT_TRUE(lowered.ok());
  absl::StatusOr<UnitTimeResult> result = SimulateUnitTime(*lowered);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps.size(), 11u);
  EXPECT_EQ(FormatUnitTimeline(*result),
            "0F0|-\n"
            "0SEND_F0|1RECV_F0\n"
            "0F1|-\n"
            "0SEND_F1|1RECV_F1\n"
            "-|1F0\n"
            "-|1B0\n"
            "0RECV_B0|1SEND_B0\n"
            "0B0|1F1\n"
            "-|1B1\n"
            "0RECV_B1|1SEND_B1\n"
            "0B1|-\n");
}

TEST(UnitTimeTest, LowersComputeOnlySchedulesFirst) {
  const PipelineSchedule compute =
      MakeSchedule({0, 1}, 2, {"0F0,0F1,_,0B0,_,0B1", "_,1F0,1B0,1F1,1B1,_"});
  absl::StatusOr<UnitTimeResult> result = SimulateUnitTime(compute);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->steps.size(), 11u);
}

TEST(UnitTimeTest, ReportsAStall) {
  // The RECV waits for a SEND that is never issued before it on rank 0.
  const PipelineSchedule bad =
      MakeSchedule({0, 1}, 1, {"0RECV_B0,0F0,0SEND_F0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0"});
  absl::StatusOr<UnitTimeResult> result = SimulateUnitTime(bad);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("rank 0 at 0RECV_B0"), std::string::npos)
      << result.status();
}

TEST(UnitTimeTest, EveryBuiltInScheduleCompletes) {
  for (ScheduleKind kind : kAllScheduleKinds) {
    absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, 4, 8, 2);
    ASSERT_TRUE(s.ok());
    absl::StatusOr<UnitTimeResult> result = SimulateUnitTime(*s);
    ASSERT_TRUE(result.ok()) << ScheduleKindName(kind) << ": " << result.status();
    int placed = 0;
    for (const auto& row : result->steps) {
      for (const auto& a : row) placed += a.has_value();
    }
    absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*s);
    EXPECT_EQ(placed, lowered->NumActions()) << ScheduleKindName(kind);
  }
}

}  // namespace
}  // namespace pipeplan::schedule
