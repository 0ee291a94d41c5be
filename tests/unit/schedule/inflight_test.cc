#include "pipeplan/core/schedule/inflight.h"

#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/simulator.h"
#include "test_util.h"

namespace pipeplan::schedule {
namespace {

TEST(PeakInflightTest, ClosedForms) {
  EXPECT_EQ(*PeakInflightMicrobatches(ScheduleKind::kGPipe, 0, 4, 16), 16);
  EXPECT_EQ(*PeakInflightMicrobatches(ScheduleKind::k1F1B, 0, 4, 16), 4);
  EXPECT_EQ(*PeakInflightMicrobatches(ScheduleKind::k1F1B, 3, 4, 16), 1);
  EXPECT_EQ(*PeakInflightMicrobatches(ScheduleKind::k1F1B, 0, 4, 2), 2);
  EXPECT_EQ(*PeakInflightMicrobatches(ScheduleKind::kLoopedBFS, 5, 8, 6, 2), 6);
}

TEST(PeakInflightTest, AgreesWithTheSimulatorOnEveryStage) {
  for (const testing::BuiltSchedule& b : testing::EveryBuildableSchedule()) {
    const PipelineSchedule& s = b.schedule;
    absl::StatusOr<SimulationResult> r = Simulate(s, StageCosts::Uniform(s.num_stages, 1, 1, 1));
    ASSERT_TRUE(r.ok());
    for (int stage = 0; stage < s.num_stages; ++stage) {
      absl::StatusOr<int> peak =
          PeakInflightMicrobatches(b.kind, stage, s.num_stages, b.microbatches, b.chunks);
      ASSERT_TRUE(peak.ok()) << peak.status();
      EXPECT_EQ(*peak, r->peak_inflight_per_stage[stage]) << b.label << " stage=" << stage;
    }
  }
}

TEST(PeakInflightTest, RejectsBadArguments) {
  EXPECT_FALSE(PeakInflightMicrobatches(ScheduleKind::kZBVZeroBubble, 0, 5, 8).ok());
  EXPECT_FALSE(PeakInflightMicrobatches(ScheduleKind::k1F1B, 4, 4, 8).ok());
  EXPECT_FALSE(PeakInflightMicrobatches(ScheduleKind::kDualPipeV, 0, 8, 7).ok());
}

}  // namespace
}  // namespace pipeplan::schedule
