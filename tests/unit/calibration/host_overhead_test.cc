// Host time per message: recovered from the reports' step breakdown, per
// device and direction (SEND, RECV), with outlier steps and unusable reports
// left out.
#include "pipeplan/core/host_overhead.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pipeplan {
namespace {

// A report of one F and `messages` SEND/RECV (alternating, RECV first),
// each SEND posted in `per_send` seconds and each RECV in `per_recv`, then
// waited on for 5 ms, and a long per-step tail (an optimizer step) that is
// no message's.
StepSample Report(const std::string& device, int64_t step, int messages, double per_send,
                  double per_recv) {
  StepSample s{.worker_id = "w-" + device, .device_id = device, .step = step};
  s.timings.push_back({.action = "0F0", .seconds = 0.01});
  for (int i = 0; i < messages; ++i) {
    const bool send = i % 2 == 1;
    s.timings.push_back({.action = (send ? "0SEND_F" : "1RECV_B") + std::to_string(i),
                         .seconds = (send ? per_send : per_recv) + 5e-3,
                         .post_unix_us = 1'000'000 + i,
                         .wait_seconds = 5e-3});
  }
  s.compute_seconds = 0.01;
  s.comm_seconds = messages * 5e-3;
  s.step_seconds = s.compute_seconds + s.comm_seconds + messages * (per_send + per_recv) / 2 + 0.1;
  return s;
}

StepSample Report(const std::string& device, int64_t step, int messages, double per_message) {
  return Report(device, step, messages, per_message, per_message);
}

TEST(HostOverhead, RecoversSecondsPerMessagePerDevice) {
  std::vector<StepSample> samples;
  for (int step = 0; step < 5; ++step) {
    samples.push_back(Report("a", step, 16, 2e-3));
    samples.push_back(Report("b", step, 32, 1e-3));
  }
  const HostOverhead fit = FitHostOverhead(samples);
  ASSERT_EQ(fit.devices.size(), 2u);
  EXPECT_NEAR(fit.SendSeconds("a"), 2e-3, 1e-12);
  EXPECT_NEAR(fit.RecvSeconds("a"), 2e-3, 1e-12);
  EXPECT_NEAR(fit.SendSeconds("b"), 1e-3, 1e-12);
  EXPECT_EQ(fit.devices.at("a").send.samples, 5);
  EXPECT_EQ(fit.devices.at("a").recv.samples, 5);
  // A device without a fit gets the median of the fitted ones.
  EXPECT_NEAR(fit.SendSeconds("c"), 1.5e-3, 1e-12);
  EXPECT_NEAR(fit.RecvSeconds("c"), 1.5e-3, 1e-12);
}

// A SEND writes its message in the caller's thread, a RECV only posts a
// buffer: the two are fitted apart, not averaged.
TEST(HostOverhead, FitsSendsAndRecvsApart) {
  std::vector<StepSample> samples;
  for (int step = 0; step < 5; ++step) {
    samples.push_back(Report("a", step, 16, 3e-3, 1e-4));
    samples.push_back(Report("b", step, 8, 1e-3, 3e-4));
  }
  // Only RECVs on this device: it gets a RECV fit and the default SEND.
  for (int step = 0; step < 5; ++step) samples.push_back(Report("c", step, 1, 9e-3, 2e-4));
  const HostOverhead fit = FitHostOverhead(samples);
  ASSERT_EQ(fit.devices.size(), 3u);
  EXPECT_NEAR(fit.SendSeconds("a"), 3e-3, 1e-12);
  EXPECT_NEAR(fit.RecvSeconds("a"), 1e-4, 1e-12);
  EXPECT_NEAR(fit.SendSeconds("b"), 1e-3, 1e-12);
  EXPECT_NEAR(fit.RecvSeconds("b"), 3e-4, 1e-12);
  EXPECT_EQ(fit.devices.at("c").send.samples, 0);
  EXPECT_NEAR(fit.SendSeconds("c"), 2e-3, 1e-12);  // median of a's and b's
  EXPECT_NEAR(fit.RecvSeconds("c"), 2e-4, 1e-12);
  EXPECT_NEAR(fit.default_recv_seconds, 2e-4, 1e-12);
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
  EXPECT_EQ(fit.devices.at("a").send.samples, 9);
  EXPECT_NEAR(fit.SendSeconds("a"), 2.004e-3, 1e-9);
  EXPECT_NEAR(fit.RecvSeconds("a"), 2.004e-3, 1e-9);
}

TEST(HostOverhead, NeedsMinSamplesAndNeverGoesNegative) {
  std::vector<StepSample> samples = {Report("a", 0, 8, 1e-3), Report("a", 1, 8, 1e-3)};
  EXPECT_TRUE(FitHostOverhead(samples).empty());
  EXPECT_EQ(FitHostOverhead(samples).SendSeconds("a"), 0);
  // Waits reported longer than the action (clock granularity): no host time.
  for (int step = 0; step < 3; ++step) {
    StepSample s = Report("b", step, 8, 0);
    for (TimingSample& t : s.timings) t.wait_seconds += 1e-4;
    samples.push_back(s);
  }
  const HostOverhead fit = FitHostOverhead(samples, {.min_samples = 3});
  ASSERT_EQ(fit.devices.size(), 1u);
  EXPECT_EQ(fit.SendSeconds("b"), 0);
  EXPECT_EQ(fit.RecvSeconds("b"), 0);
}

}  // namespace
}  // namespace pipeplan
