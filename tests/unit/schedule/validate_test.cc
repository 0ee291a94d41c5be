#include "pipeplan/core/schedule/validate.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace pipeplan::schedule {
namespace {

using ::testing::HasSubstr;
using testing::MakeSchedule;

std::string Error(const PipelineSchedule& s) {
  absl::Status st = ValidateSchedule(s);
  EXPECT_FALSE(st.ok());
  return std::string(st.message());
}

TEST(ValidateScheduleTest, AcceptsGoodSchedules) {
  EXPECT_TRUE(
      ValidateSchedule(MakeSchedule({0, 1}, 2, {"0F0,0F1,_,0B0,_,0B1", "_,1F0,1B0,1F1,1B1,_"}))
          .ok());
  EXPECT_TRUE(ValidateSchedule(MakeSchedule({0}, 1, {"0F0,0I0,0W0"})).ok());
}

TEST(ValidateScheduleTest, NamesTheFirstRankAndStepThatCanNeverRun) {
  // Rank 1 runs the backward of microbatch 1 before microbatch 0, while rank 0
  // needs microbatch 0's gradient first: a deadlock.
  const PipelineSchedule s = MakeSchedule({0, 1}, 2, {"0F0,0F1,0B1,0B0", "1F0,1F1,1B0,1B1"});
  EXPECT_TRUE(ValidateSchedule(s).ok());  // this order is fine: rank 0 waits, no cycle
  const PipelineSchedule dead = MakeSchedule({0, 1}, 2, {"0F0,0B0,0F1,0B1", "1F1,1F0,1B0,1B1"});
  EXPECT_THAT(Error(dead), HasSubstr("rank 0 step 1 (0B0) can never run: it needs 1B0, which is "
                                     "at rank 1 step 2 and never runs either"));
}

TEST(ValidateScheduleTest, LocalOrderViolation) {
  EXPECT_THAT(Error(MakeSchedule({0}, 1, {"0B0,0F0"})),
              HasSubstr("rank 0 step 0 (0B0) can never run: it needs 0F0, which rank 0 only "
                        "runs later, at step 1"));
  EXPECT_THAT(Error(MakeSchedule({0}, 1, {"0F0,0W0,0I0"})),
              HasSubstr("rank 0 step 1 (0W0) can never run: it needs 0I0"));
}

TEST(ValidateScheduleTest, CountsForwardsAndBackwards) {
  EXPECT_THAT(Error(MakeSchedule({0}, 2, {"0F0,0B0,0F1"})),
              HasSubstr("stage 0 microbatch 1 has no backward"));
  EXPECT_THAT(Error(MakeSchedule({0}, 2, {"0F0,0B0,0B1"})),
              HasSubstr("stage 0 microbatch 1 has no forward"));
  EXPECT_THAT(Error(MakeSchedule({0}, 1, {"0F0,0B0,0F0"})),
              HasSubstr("rank 0 step 2 (0F0): stage 0 microbatch 0 gets a second forward"));
  EXPECT_THAT(Error(MakeSchedule({0}, 1, {"0F0,0I0,0B0"})), HasSubstr("gets a second backward"));
  EXPECT_THAT(Error(MakeSchedule({0}, 1, {"0F0,0I0"})), HasSubstr("an I but no W"));
}

TEST(ValidateScheduleTest, PlacementAndRanges) {
  EXPECT_THAT(Error(MakeSchedule({0, 1}, 1, {"0F0,1F0,1B0,0B0", ""})),
              HasSubstr("rank 0 step 1 (1F0): stage 1 is placed on rank 1, not rank 0"));
  EXPECT_THAT(Error(MakeSchedule({0}, 1, {"0F0,0B0,0F3"})),
              HasSubstr("microbatch 3 is out of range"));
  EXPECT_THAT(Error(MakeSchedule({0}, 1, {"0F0,0B0,2F0"})), HasSubstr("stage 2 is out of range"));
}

TEST(ValidateScheduleTest, LoweredSchedulesNeedMatchingCommunication) {
  EXPECT_THAT(Error(MakeSchedule({0, 1}, 1, {"0F0,0SEND_F0,0RECV_B0,0B0", "1F0,1B0,1SEND_B0"})),
              HasSubstr("missing its 1RECV_F0"));
  EXPECT_THAT(Error(MakeSchedule({0, 0}, 1, {"0F0,0SEND_F0,1RECV_F0,1F0,1B0,0B0"})),
              HasSubstr("stages 0 and 1 are both on rank 0"));
  // RECV issued before the peer can ever send: rank 1 waits for its own B.
  EXPECT_THAT(
      Error(MakeSchedule({0, 1}, 1, {"0F0,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1SEND_B0,1F0,1B0"})),
      HasSubstr("rank 0 step 2 (0RECV_B0) can never run: it needs 1SEND_B0"));
}

}  // namespace
}  // namespace pipeplan::schedule
