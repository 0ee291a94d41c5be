// Steps disturbed by a failure or a switch never feed calibration
// (planner_service/server/replan/disturbed_steps.h): a step a worker ran
// twice (its version rebuilt after a failure) and a step stretched far past
// the worker's usual time are dropped; a device slow all along is kept.
#include "disturbed_steps.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

namespace pipeplan::server {
namespace {

StepSample Step(const std::string& worker, int64_t step, double seconds) {
  StepSample s;
  s.worker_id = worker;
  s.step = step;
  s.step_seconds = seconds;
  return s;
}

std::set<std::pair<std::string, int64_t>> Kept(const std::vector<StepSample>& samples) {
  std::set<std::pair<std::string, int64_t>> out;
  for (const StepSample& s : samples) out.insert({s.worker_id, s.step});
  return out;
}

TEST(DisturbedSteps, ARepeatedOrStretchedStepIsDroppedASlowDeviceIsKept) {
  std::vector<StepSample> samples;
  for (int64_t step = 10; step < 20; ++step) {
    samples.push_back(Step("w0", step, 0.1));
    samples.push_back(Step("w1", step, 0.5));  // a straggler: slow every step
  }
  samples.push_back(Step("w0", 20, 0.9));  // around a kill: 9x its median
  samples.push_back(Step("w1", 14, 0.5));  // step 14 again after a rebuild
  const auto kept = Kept(WithoutDisturbedSteps(samples));
  EXPECT_FALSE(kept.contains({"w0", 20}));
  EXPECT_FALSE(kept.contains({"w1", 14}));
  EXPECT_TRUE(kept.contains({"w0", 14}));
  for (int64_t step = 10; step < 20; ++step) {
    if (step != 14) {
      EXPECT_TRUE(kept.contains({"w1", step})) << step;
    }
  }
  EXPECT_EQ(kept.size(), 19u);
}

TEST(DisturbedSteps, StepsWithoutAWallTimeAreKept) {
  std::vector<StepSample> samples = {Step("w0", 1, 0), Step("w0", 2, 0)};
  EXPECT_EQ(WithoutDisturbedSteps(samples).size(), 2u);
}

}  // namespace
}  // namespace pipeplan::server
