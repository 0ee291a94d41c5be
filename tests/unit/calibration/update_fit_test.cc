// The end of a step: each rank's update after the ranks agree, fitted by its
// parameter bytes at its seconds alone on its CPUs, and a plan's tail from
// its ranks' bytes and sharing.
#include "pipeplan/core/update_fit.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pipeplan {
namespace {

// Rank r's report of `step`: it ran stage r's F and B, arrived at EndStep
// at `arrival` and ended at `end` (seconds after the step's start, which
// every rank shares).
StepSample Report(int step, int rank, double arrival, double end, const std::string& pool = "",
                  int cpus = 0) {
  StepSample s{.worker_id = "w" + std::to_string(rank), .step = step};
  s.rank = rank;
  s.start_unix_us = 1'000'000'000;
  s.step_seconds = end;
  s.optimizer_seconds = end - arrival;
  s.timings = {{.action = std::to_string(rank) + "F0", .seconds = 0.01},
               {.action = std::to_string(rank) + "B0", .seconds = 0.02}};
  s.cpu_pool = pool;
  s.cpu_pool_cpus = cpus;
  s.compute_threads = pool.empty() ? 0 : 1;
  return s;
}

// Three ranks on CPUs of their own holding 1, 4 and 16 MB, updating in 2 ms
// + 1 ms per MB after the last one (rank 0) arrives at 120 ms.
TEST(UpdateFit, FitsEachRanksUpdateByItsBytes) {
  const std::vector<double> bytes = {1e6, 4e6, 16e6};
  std::vector<StepSample> samples;
  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 3; ++r) {
      const double arrival = 0.120 - 0.01 * r;
      samples.push_back(Report(step, r, arrival, 0.120 + 0.002 + 1e-9 * bytes[r]));
    }
  }
  const UpdateFit fit = FitUpdates(samples, bytes);
  ASSERT_TRUE(fit.fitted);
  EXPECT_NEAR(fit.fixed_seconds, 0.002, 1e-6);
  EXPECT_NEAR(fit.seconds_per_param_byte, 1e-9, 1e-12);
  // A plan whose ranks hold 8 and 2 MB ends 10 ms after the agreement.
  const std::vector<double> plan = {8e6, 2e6};
  EXPECT_NEAR(UpdateTailSeconds(fit, plan, {}), 0.010, 1e-9);
}

// Two ranks on one CPU: 10 and 30 ms alone run side by side, at half speed
// until the short one ends (20 ms), then the long one alone (40 ms).
TEST(UpdateFit, ReadsSharedUpdatesBackToTheirSecondsAlone) {
  const std::vector<double> bytes = {1e6, 3e6};
  std::vector<StepSample> samples;
  for (int step = 0; step < 3; ++step) {
    samples.push_back(Report(step, 0, 0.100, 0.120, "h:0", 1));
    samples.push_back(Report(step, 1, 0.090, 0.140, "h:0", 1));
  }
  const UpdateFit fit = FitUpdates(samples, bytes);
  ASSERT_TRUE(fit.fitted);
  EXPECT_NEAR(fit.SoloSeconds(1e6), 0.010, 1e-9);
  EXPECT_NEAR(fit.SoloSeconds(3e6), 0.030, 1e-9);
  // The same plan back on the shared CPU: 40 ms; on CPUs of their own, 30.
  const schedule::ComputeSharing one_cpu{
      .rank_pool = {0, 0}, .rank_load = {1, 1}, .pool_capacity = {1}};
  EXPECT_NEAR(UpdateTailSeconds(fit, bytes, one_cpu), 0.040, 1e-9);
  EXPECT_NEAR(UpdateTailSeconds(fit, bytes, {}), 0.030, 1e-9);
  // Two replicas of the 30 ms rank on two CPUs (load 2): 30 ms.
  const schedule::ComputeSharing replicas{.rank_pool = {0}, .rank_load = {2}, .pool_capacity = {2}};
  EXPECT_NEAR(UpdateTailSeconds(fit, std::vector<double>{3e6}, replicas), 0.030, 1e-9);
}

// An executor without an agreement: each rank updates when it arrives, so
// early ranks end before the last one arrives. Not fitted (the least
// EndStep stands).
TEST(UpdateFit, NoAgreementLeavesItUnfitted) {
  const std::vector<double> bytes = {1e6, 1e6};
  std::vector<StepSample> samples;
  for (int step = 0; step < 3; ++step) {
    samples.push_back(Report(step, 0, 0.100, 0.101));
    samples.push_back(Report(step, 1, 0.050, 0.051));
  }
  EXPECT_FALSE(FitUpdates(samples, bytes).fitted);
  // Nor without a wall-clock start, or with one rank.
  for (StepSample& s : samples) s.start_unix_us = 0;
  EXPECT_FALSE(FitUpdates(samples, bytes).fitted);
  EXPECT_FALSE(FitUpdates(std::vector<StepSample>{Report(0, 0, 0.1, 0.2)}, bytes).fitted);
}

}  // namespace
}  // namespace pipeplan
