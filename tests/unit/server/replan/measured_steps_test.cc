// AddMeasuredSteps (pipeplan/server/replan/measured_steps.h): one row per
// worker of a rank, so a plan with data-parallel replicas shows every
// replica's worker on its own device (it showed one worker per rank, with
// another worker's device).
#include "pipeplan/server/replan/measured_steps.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace pipeplan::server {
namespace {

// 2 ranks x 2 replicas: replica q, rank r runs on device d<2q+r> as worker w<2q+r>.
v1::Plan TwoByTwo() {
  v1::Plan plan;
  for (int q = 0; q < 2; ++q) {
    v1::Replica* replica = plan.add_replicas();
    for (int r = 0; r < 2; ++r) replica->add_rank_device_ids(absl::StrCat("d", 2 * q + r));
  }
  return plan;
}

std::vector<StepSample> Samples(int steps) {
  std::vector<StepSample> out;
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < 4; ++i) {
      StepSample s;
      s.worker_id = absl::StrCat("w", i);
      s.device_id = absl::StrCat("d", i);
      s.step = step;
      s.rank = i % 2;
      s.start_unix_us = 1'000'000;
      s.step_seconds = 0.1 * (i + 1);
      s.compute_seconds = 0.05;
      s.peak_memory_bytes = 1000 * (i + 1);
      out.push_back(s);
    }
  }
  return out;
}

TEST(MeasuredSteps, EveryReplicaWorkerHasItsOwnRowOnItsOwnDevice) {
  v1::JobObservation o;
  AddMeasuredSteps(Samples(3), TwoByTwo(), /*num_ranks=*/2, &o);
  EXPECT_EQ(o.steps(), 3);
  EXPECT_NEAR(o.measured_step_seconds(), 0.4, 1e-12);
  ASSERT_EQ(o.ranks_size(), 4);
  // By rank, then replica.
  const int want[4][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  for (int k = 0; k < 4; ++k) {
    const v1::RankObservation& r = o.ranks(k);
    const int i = 2 * want[k][1] + want[k][0];  // the worker of (rank, replica)
    EXPECT_EQ(r.rank(), want[k][0]) << k;
    EXPECT_EQ(r.worker_id(), absl::StrCat("w", i)) << k;
    EXPECT_EQ(r.device_id(), absl::StrCat("d", i)) << k;
    EXPECT_NEAR(r.step_seconds(), 0.1 * (i + 1), 1e-12) << k;
    EXPECT_EQ(r.peak_memory_bytes(), 1000 * (i + 1)) << k;
  }
}

TEST(MeasuredSteps, NoStepCountsUntilEveryRankReported) {
  std::vector<StepSample> samples = Samples(2);
  samples.pop_back();                // step 1 lacks w3 (rank 1 of replica 1): rank 1 still reported
  samples.erase(samples.end() - 2);  // and w1: now no rank 1 in step 1
  v1::JobObservation o;
  AddMeasuredSteps(samples, TwoByTwo(), 2, &o);
  EXPECT_EQ(o.steps(), 1);
}

TEST(MeasuredSteps, WithoutReplicasOneRowPerRank) {
  std::vector<StepSample> samples = Samples(1);
  samples.resize(2);
  v1::JobObservation o;
  AddMeasuredSteps(samples, v1::Plan(), 2, &o);
  ASSERT_EQ(o.ranks_size(), 2);
  EXPECT_EQ(o.ranks(0).device_id(), "d0");
  EXPECT_EQ(o.ranks(1).device_id(), "d1");
}

}  // namespace
}  // namespace pipeplan::server
