#include "pipeplan/core/cpu_pools.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pipeplan {
namespace {

// A report of `device` whose step starts at `start_s` (seconds after an
// arbitrary epoch) with the given timings, on pool "m:0" of `cpus` CPUs.
StepSample Report(const std::string& device, double start_s, std::vector<TimingSample> timings,
                  int cpus = 1, int threads = 1, int64_t step = 5) {
  StepSample s;
  s.worker_id = "w-" + device;
  s.device_id = device;
  s.step = step;
  s.start_unix_us = static_cast<int64_t>(1e6 * (1000 + start_s));
  s.timings = std::move(timings);
  s.cpu_pool = "m:0";
  s.cpu_pool_cpus = cpus;
  s.compute_threads = threads;
  return s;
}

TimingSample Compute(const std::string& action, double reached, double seconds) {
  return {.action = action, .seconds = seconds, .start_seconds = reached};
}

TEST(CpuPoolsTest, PoolsComeFromEachDevicesLatestReport) {
  StepSample old_a = Report("a", 0, {}, 4, 1, 1);
  old_a.cpu_pool = "m:0-1";
  std::vector<StepSample> samples = {old_a, Report("a", 1, {}, 2, 2, 2), Report("b", 0, {}, 2),
                                     Report("c", 0, {})};
  samples[3].cpu_pool.clear();  // computes on a GPU
  const CpuPools pools = CpuPoolsOf(samples);
  ASSERT_EQ(pools.pools.size(), 1u);
  EXPECT_EQ(pools.pools[0].name, "m:0");
  EXPECT_EQ(pools.pools[0].cpus, 2);
  EXPECT_EQ(pools.device_pool.at("a"), 0);
  EXPECT_EQ(pools.device_pool.at("b"), 0);
  EXPECT_EQ(pools.device_threads.at("a"), 2);
  EXPECT_FALSE(pools.device_pool.contains("c"));
}

TEST(CpuPoolsTest, TwoComputesOnOneCpuEachCountHalfTheirOverlap) {
  // a computes over [0, 2], b over [1, 3], one CPU: each had it alone for
  // one second and half of it for the other.
  std::vector<StepSample> samples = {Report("a", 0, {Compute("0F0", 0, 2)}),
                                     Report("b", 1, {Compute("1F0", 0, 2)})};
  const std::vector<StepSample> solo = SoloComputeTimes(samples, CpuPoolsOf(samples));
  EXPECT_NEAR(solo[0].timings[0].seconds, 1.5, 1e-6);
  EXPECT_NEAR(solo[1].timings[0].seconds, 1.5, 1e-6);
}

TEST(CpuPoolsTest, AComputeRunsUntilItsRankReachesTheNextAction) {
  // The F was reached at 0 but waited for its input: it ran over [2, 3],
  // while b's compute held the only CPU over [0, 2.5].
  std::vector<StepSample> samples = {
      Report("a", 0, {Compute("1F0", 0, 1), {.action = "1SEND_F0", .start_seconds = 3}}),
      Report("b", 0, {Compute("0F0", 0, 2.5)})};
  const std::vector<StepSample> solo = SoloComputeTimes(samples, CpuPoolsOf(samples));
  EXPECT_NEAR(solo[0].timings[0].seconds, 0.25 + 0.5, 1e-6);
  EXPECT_NEAR(solo[1].timings[0].seconds, 2 + 0.25, 1e-6);
  EXPECT_EQ(solo[0].timings[1].seconds, 0);  // messages are left as they are
}

TEST(CpuPoolsTest, ComputesWithinTheCpusAndOtherDevicesAreUnchanged) {
  std::vector<StepSample> samples = {Report("a", 0, {Compute("0F0", 0, 2)}, 2),
                                     Report("b", 0, {Compute("1F0", 0, 2)}, 2),
                                     Report("g", 0, {Compute("2F0", 0, 2)})};
  samples[2].cpu_pool.clear();
  StepSample unstamped = Report("a", 0, {Compute("0B0", 0, 2)}, 2);
  unstamped.start_unix_us = 0;
  samples.push_back(unstamped);
  const std::vector<StepSample> solo = SoloComputeTimes(samples, CpuPoolsOf(samples));
  for (const StepSample& s : solo) EXPECT_DOUBLE_EQ(s.timings[0].seconds, 2) << s.device_id;
}

TEST(CpuPoolsTest, ThreadsLoadThePool) {
  // Two computes of two threads each on two CPUs: each at half speed.
  std::vector<StepSample> samples = {Report("a", 0, {Compute("0F0", 0, 2)}, 2, 2),
                                     Report("b", 0, {Compute("1F0", 0, 2)}, 2, 2)};
  const std::vector<StepSample> solo = SoloComputeTimes(samples, CpuPoolsOf(samples));
  EXPECT_NEAR(solo[0].timings[0].seconds, 1, 1e-6);
}

TEST(CpuPoolsTest, SharingCountsEveryReplicaOfARankOnItsPool) {
  CpuPools pools;
  pools.pools = {{"m:0-1", 2}, {"n:0-1", 2}};
  pools.device_pool = {{"a", 0}, {"b", 0}, {"c", 1}, {"d", 0}};
  pools.device_threads = {{"a", 1}, {"b", 1}, {"c", 1}, {"d", 2}};
  // Rank 0 on a (replica b beside it, c on another machine), rank 1 on d,
  // rank 2 on a GPU.
  const schedule::ComputeSharing s = SharingOf(pools, {{"a", "b", "c"}, {"d"}, {"gpu0"}});
  EXPECT_EQ(s.rank_pool, (std::vector<int>{0, 0, -1}));
  EXPECT_EQ(s.rank_load, (std::vector<double>{2, 2, 1}));
  EXPECT_EQ(s.pool_capacity, (std::vector<double>{2, 2}));
  EXPECT_TRUE(SharingOf(pools, {{"gpu0"}, {"gpu1"}}).rank_pool.empty());
}

}  // namespace
}  // namespace pipeplan
