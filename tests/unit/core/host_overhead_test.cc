// Host time per message: recovered from the reports' step breakdown, per
// device, with outlier steps and unusable reports left out.
#include "pipeplan/core/host_overhead.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pipeplan {
namespace {

// A report of one F and `messages` SEND/RECV, each posted in `per_message`
// seconds and then waited on for 5 ms, and a long per-step tail (an
// optimizer step) that is no message's.
StepSample Report(const std::string& device, int64_t step, int messages, double per_message) {
  StepSample s{.worker_id = "w-" + device, .device_id = device, .step = step};
  s.timings.push_back({.action = "0F0", .seconds = 0.01});
  for (int i = 0; i < messages; ++i) {
    s.timings.push_back({.action = (i % 2 ? "0SEND_F" : "1RECV_B") + std::to_string(i),
                         .seconds = per_message + 5e-3,
                         .post_unix_us = 1'000'000 + i,
                         .wait_seconds = 5e-3});
  }
  s.compute_seconds = 0.01;
  s.comm_seconds = messages * 5e-3;
  s.step_seconds = s.compute_seconds + s.comm_seconds + messages * per_message + 0.1;
  return s;
}

TEST(HostOverhead, RecoversSecondsPerMessagePerDevice) {
  std::vector<StepSample> samples;
  for (int step = 0; step < 5; ++step) {
    samples.push_back(Report("a", step, 16, 2e-3));
    samples.push_back(Report("b", step, 32, 1e-3));
  }
  const HostOverhead fit = FitHostOverhead(samples);
  ASSERT_EQ(fit.devices.size(), 2u);
  EXPECT_NEAR(fit.MessageSeconds("a"), 2e-3, 1e-12);
  EXPECT_NEAR(fit.MessageSeconds("b"), 1e-3, 1e-12);
  EXPECT_EQ(fit.devices.at("a").samples, 5);
  // A device without a fit gets the median of the fitted ones.
  EXPECT_NEAR(fit.MessageSeconds("c"), 1.5e-3, 1e-12);
}

TEST(HostOverhead, DropsOutlierStepsAndUnusableReports) {
  std::vector<StepSample> samples;
  for (int step = 0; step < 9; ++step) samples.push_back(Report("a", step, 16, 2e-3 + step * 1e-6));
  samples.push_back(Report("a", 9, 16, 0.5));       // descheduled for a whole step
  StepSample unstamped = Report("a", 10, 16, 9.0);  // waits not reported apart
  for (TimingSample& t : unstamped.timings) t.post_unix_us = 0;
  samples.push_back(unstamped);
  samples.push_back(Report("a", 11, 0, 9.0));  // no messages: nothing to charge
  samples.push_back(Report("", 12, 16, 9.0));  // no device
  const HostOverhead fit = FitHostOverhead(samples);
  ASSERT_EQ(fit.devices.size(), 1u);
  EXPECT_EQ(fit.devices.at("a").samples, 9);
  EXPECT_NEAR(fit.MessageSeconds("a"), 2.004e-3, 1e-9);
}

TEST(HostOverhead, NeedsMinSamplesAndNeverGoesNegative) {
  std::vector<StepSample> samples = {Report("a", 0, 8, 1e-3), Report("a", 1, 8, 1e-3)};
  EXPECT_TRUE(FitHostOverhead(samples).empty());
  EXPECT_EQ(FitHostOverhead(samples).MessageSeconds("a"), 0);
  // Waits reported longer than the action (clock granularity): no host time.
  for (int step = 0; step < 3; ++step) {
    StepSample s = Report("b", step, 8, 0);
    for (TimingSample& t : s.timings) t.wait_seconds += 1e-4;
    samples.push_back(s);
  }
  const HostOverhead fit = FitHostOverhead(samples, {.min_samples = 3});
  ASSERT_EQ(fit.devices.size(), 1u);
  EXPECT_EQ(fit.MessageSeconds("b"), 0);
}

}  // namespace
}  // namespace pipeplan
