#include "pipeplan/core/schedule/action.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan::schedule {
namespace {

TEST(ActionTest, RoundTripsEveryType) {
  for (const char* text : {"0F0", "12I3", "1W7", "3B0", "1SEND_F3", "2RECV_F3", "2SEND_B0",
                           "1RECV_B0", "(0F3;3B1)OVERLAP_F_B"}) {
    absl::StatusOr<std::optional<Action>> a = ParseAction(text);
    ASSERT_TRUE(a.ok()) << text << ": " << a.status();
    ASSERT_TRUE(a->has_value());
    EXPECT_EQ(ActionToString(**a), text);
  }
}

TEST(ActionTest, ParsesFields) {
  absl::StatusOr<std::optional<Action>> a = ParseAction(" 1SEND_F3 ");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(**a, (Action{1, ActionType::kSendF, 3}));
  absl::StatusOr<std::optional<Action>> o = ParseAction("(0F3;3B1)OVERLAP_F_B");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(ForwardHalf(**o), (Action{0, ActionType::kForward, 3}));
  EXPECT_EQ(BackwardHalf(**o), (Action{3, ActionType::kFullBackward, 1}));
}

TEST(ActionTest, EmptyIsIdle) {
  absl::StatusOr<std::optional<Action>> a = ParseAction("  ");
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());
}

TEST(ActionTest, RejectsMalformed) {
  for (const char* text : {"F0", "0X1", "0F", "0F1x", "1SEND_F", "(0F1)OVERLAP_F_B",
                           "(0B1;1F0)OVERLAP_F_B", "0UNSHARD", "abc"}) {
    EXPECT_FALSE(ParseAction(text).ok()) << text;
  }
  EXPECT_NE(ParseAction("0UNSHARD").status().message().find("not modelled"), std::string::npos);
}

TEST(ScheduleKindTest, ParsesPyTorchNamesCaseInsensitively) {
  for (ScheduleKind kind : kAllScheduleKinds) {
    absl::StatusOr<ScheduleKind> parsed = ParseScheduleKind(ScheduleKindName(kind));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_EQ(*ParseScheduleKind("interleaved1f1b"), ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(*ParseScheduleKind("ZBVZEROBUBBLE"), ScheduleKind::kZBVZeroBubble);
  EXPECT_EQ(*ParseScheduleKind("dualpipev"), ScheduleKind::kDualPipeV);
  absl::StatusOr<ScheduleKind> bad = ParseScheduleKind("PipeDream");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("Interleaved1F1B"), std::string::npos);
}

TEST(ScheduleKindTest, StagesPerRank) {
  EXPECT_EQ(StagesPerRank(ScheduleKind::kGPipe, 4), 1);
  EXPECT_EQ(StagesPerRank(ScheduleKind::k1F1B, 4), 1);
  EXPECT_EQ(StagesPerRank(ScheduleKind::kInterleaved1F1B, 4), 4);
  EXPECT_EQ(StagesPerRank(ScheduleKind::kLoopedBFS, 3), 3);
  EXPECT_EQ(StagesPerRank(ScheduleKind::kInterleavedZeroBubble, 2), 2);
  EXPECT_EQ(StagesPerRank(ScheduleKind::kZBVZeroBubble, 7), 2);
  EXPECT_EQ(StagesPerRank(ScheduleKind::kDualPipeV, 1), 2);
}

// Stage indices are stored in 24 bits; a larger one is an error, not a
// silently wrapped stage.
TEST(ActionTest, StageBound) {
  EXPECT_LE(sizeof(std::optional<Action>), 20u);
  const std::string last = std::to_string(kMaxStages - 1) + "F0";
  absl::StatusOr<std::optional<Action>> ok = ParseAction(last);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->stage, kMaxStages - 1);
  EXPECT_EQ(ActionToString(**ok), last);
  absl::StatusOr<std::optional<Action>> bad = ParseAction(std::to_string(kMaxStages) + "F0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("largest supported stage"), std::string::npos);
  EXPECT_FALSE(ParseAction("(0F0;" + std::to_string(kMaxStages) + "B0)OVERLAP_F_B").ok());
}

}  // namespace
}  // namespace pipeplan::schedule
