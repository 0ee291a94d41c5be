// The membership rule of the replan policy (planner_service/server/replan/
// membership_decision.h): a loss always publishes; a worker that comes back
// is used unless the plan with it is measurably slower, so a calibration
// skewed by the steps around a failure (issue 26: a "-3.0%" gain kept a
// restarted worker out and the job finished on 3 ranks) cannot keep it out.
#include "membership_decision.h"

#include <gtest/gtest.h>

#include <limits>

namespace pipeplan::server {
namespace {

v1::Plan PlanOn(std::initializer_list<const char*> devices) {
  v1::Plan p;
  for (const char* d : devices) p.add_stages()->set_device_id(d);
  return p;
}

ReplanOutcome Steps(double current, double next) {
  return {.current_step_seconds = current, .new_step_seconds = next};
}

TEST(MembershipDecision, ALossPublishesWhateverThePrediction) {
  EXPECT_FALSE(MembershipSkip(ReplanTrigger::kWorkerLost, Steps(1.0, 1.0), PlanOn({"d0"}), {}));
  EXPECT_FALSE(MembershipSkip(ReplanTrigger::kWorkerLost, Steps(1.0, 2.0), PlanOn({"d0"}), {}));
  EXPECT_TRUE(IsMembershipTrigger(ReplanTrigger::kWorkerLost));
  EXPECT_TRUE(IsMembershipTrigger(ReplanTrigger::kWorkerJoined));
  EXPECT_FALSE(IsMembershipTrigger(ReplanTrigger::kCalibration));
}

TEST(MembershipDecision, AReturningWorkerIsUsedWithinThePredictionsNoise) {
  const v1::Plan grown = PlanOn({"d0", "d1", "d2", "d3"});
  // The failing run's prediction: 3.0% slower with the worker back.
  EXPECT_FALSE(MembershipSkip(ReplanTrigger::kWorkerJoined, Steps(1.0, 1.03), grown, {"d3"}));
  // No gain needed either way, nor a switch-cost floor.
  EXPECT_FALSE(MembershipSkip(ReplanTrigger::kWorkerJoined, Steps(1.0, 1.0), grown, {"d3"}));
  EXPECT_FALSE(MembershipSkip(ReplanTrigger::kWorkerJoined, Steps(1.0, 0.8), grown, {"d3"}));
  // The current plan cannot run any more: take the new one.
  EXPECT_FALSE(MembershipSkip(ReplanTrigger::kWorkerJoined,
                              Steps(std::numeric_limits<double>::infinity(), 1.0), grown, {"d3"}));
}

TEST(MembershipDecision, AMeasurablySlowerPlanOrOneWithoutTheWorkerIsNotPublished) {
  const v1::Plan grown = PlanOn({"d0", "d1", "d2", "d3"});
  std::optional<std::string> slower =
      MembershipSkip(ReplanTrigger::kWorkerJoined, Steps(1.0, 1.5), grown, {"d3"});
  ASSERT_TRUE(slower);
  EXPECT_NE(slower->find("measurably slower"), std::string::npos) << *slower;
  std::optional<std::string> without =
      MembershipSkip(ReplanTrigger::kWorkerJoined, Steps(1.0, 0.9), PlanOn({"d0", "d1"}), {"d3"});
  ASSERT_TRUE(without);
  EXPECT_NE(without->find("leaves the joined devices (d3) out"), std::string::npos) << *without;
  // A replica on the joined device counts as using it.
  v1::Plan replicated = PlanOn({"d0"});
  replicated.add_replicas()->add_rank_device_ids("d0");
  replicated.add_replicas()->add_rank_device_ids("d3");
  EXPECT_FALSE(MembershipSkip(ReplanTrigger::kWorkerJoined, Steps(1.0, 1.0), replicated, {"d3"}));
}

}  // namespace
}  // namespace pipeplan::server
