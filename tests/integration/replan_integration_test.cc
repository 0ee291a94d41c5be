// Calibration end to end: a real pipeplan-planner and 4 pipeplan-worker
// processes on 127.0.0.1 (Gloo, synthetic executor). Worker w1 runs with
// --slowdown 2, i.e. its device is twice as slow as the job's cluster says.
// The planner's replanning policy notices it from the step reports, publishes
// version 2 that gives that device less work, and every worker switches to
// it at the same step boundary.
#include <signal.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "planner_process.h"
#include "worker_process.h"

namespace pipeplan::testing {
namespace {

// 16 equal nodes of 2 ms forward (4 ms backward) each on 4 equal devices:
// version 1 gives every stage 4 nodes.
v1::PlanRequest ChainJob() {
  return UniformChainRequest(
      {.forward_flops = 2e-3 * 100e12, .param_bytes = 1e6, .output_bytes = 4096});
}

const v1::Stage* StageOn(const v1::Plan& plan, const std::string& device) {
  for (const v1::Stage& s : plan.stages()) {
    if (s.device_id() == device) return &s;
  }
  return nullptr;
}

TEST(ReplanIntegration, SlowWorkerGetsLessWorkInVersionTwo) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Seconds(25);
  auto planner = PlannerProcess::Start(
      {"--lease-seconds", "5", "--replan-min-steps", "3", "--replan-warmup-steps", "1",
       "--replan-min-interval-seconds", "1", "--replan-min-gain", "0.05"});
  ASSERT_TRUE(planner.ok()) << planner.status();
  auto client = (*planner)->Client();
  ASSERT_TRUE(client.ok());
  auto job = (*client)->CreateJob("calibrate", ChainJob());
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Plan v1_plan = job->plan();
  ASSERT_EQ(v1_plan.stages_size(), 4);
  for (const v1::Stage& s : v1_plan.stages()) ASSERT_EQ(s.num_nodes(), 4);

  TempDir dir;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> args =
        WorkerArgs((*planner)->address(), job->id(), absl::StrCat("w", r), absl::StrCat("gpu", r));
    args.insert(args.end(), {"--time-scale", "1"});
    if (r == 1) args.insert(args.end(), {"--slowdown", "2.0"});
    workers.push_back(std::make_unique<WorkerProcess>(dir.path(), absl::StrCat("w", r), args));
  }

  // The policy publishes version 2 on its own.
  v1::VersionedPlan v2;
  while (absl::Now() < deadline) {
    auto got = (*client)->GetPlan(job->id(), 0);
    ASSERT_TRUE(got.ok()) << got.status();
    if (got->version() >= 2) {
      v2 = *got;
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(v2.version(), 2) << workers[1]->Output() << (*planner)->stderr_text();
  EXPECT_TRUE(absl::StartsWith(v2.reason(), "calibration: device gpu1 is ")) << v2.reason();
  // Named against the model, or against the median device when the others
  // also ran >5% off the model (load on the test machine does that).
  EXPECT_TRUE(absl::StrContains(v2.reason(), "slower than modelled") ||
              absl::StrContains(v2.reason(), "slower than the median device"))
      << v2.reason();

  // gpu1 is measured ~2x; the others ~1x.
  std::map<std::string, double> factor;
  for (const v1::DeviceFactor& f : v2.plan().calibration().devices()) {
    factor[f.device_id()] = f.time_factor();
  }
  ASSERT_EQ(factor.size(), 4u);
  EXPECT_GT(factor["gpu1"], 1.6);
  EXPECT_LT(factor["gpu1"], 2.6);
  for (const char* d : {"gpu0", "gpu2", "gpu3"}) {
    EXPECT_GT(factor[d], 0.8) << d;
    EXPECT_LT(factor[d], 1.3) << d;
  }
  // Less work for the slow device: fewer nodes, and fewer seconds than its
  // version-1 stage takes at the calibrated speed.
  const v1::Stage* old_stage = StageOn(v1_plan, "gpu1");
  const v1::Stage* new_stage = StageOn(v2.plan(), "gpu1");
  ASSERT_NE(old_stage, nullptr);
  ASSERT_NE(new_stage, nullptr);
  EXPECT_LT(new_stage->num_nodes(), old_stage->num_nodes());
  EXPECT_LT(new_stage->forward_seconds() + new_stage->backward_seconds(),
            factor["gpu1"] * (old_stage->forward_seconds() + old_stage->backward_seconds()));
  EXPECT_LT(v2.plan().calibration().step_seconds(),
            0.95 * v2.plan().calibration().previous_step_seconds());

  // Every worker runs version 2 for a few steps.
  auto reports_by_worker = [&] {
    std::map<std::string, std::vector<v1::ReportStepRequest>> out;
    auto reports = (*client)->ListStepReports(job->id(), 10'000);
    if (!reports.ok()) return out;
    for (const auto& r : reports->reports()) out[r.worker_id()].push_back(r);
    for (auto& [w, v] : out) {
      std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.step() < b.step(); });
    }
    return out;
  };
  auto all_have_v2 = [&](int count) {
    auto by = reports_by_worker();
    if (by.size() != 4) return false;
    for (auto& [w, v] : by) {
      if (std::count_if(v.begin(), v.end(), [](auto& r) { return r.plan_version() == 2; }) <
          count) {
        return false;
      }
    }
    return true;
  };
  while (!all_have_v2(3) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(all_have_v2(3)) << workers[0]->Output();
  // Still version 2: the calibrated plan is stable.
  auto now_job = (*client)->GetJob(job->id());
  ASSERT_TRUE(now_job.ok());
  EXPECT_EQ(now_job->plan_version(), 2);

  // Stop the whole job: every worker leaves (docs/elastic.md).
  for (auto& w : workers) w->Signal(SIGTERM);
  for (auto& w : workers) ASSERT_EQ(w->Wait(absl::Seconds(15)), 0) << w->Output();

  std::set<int64_t> first_v2;
  for (auto& [id, reports] : reports_by_worker()) {
    int64_t first = -1, prev = 0;
    for (const auto& r : reports) {
      EXPECT_GE(r.plan_version(), prev) << id;
      prev = r.plan_version();
      if (r.plan_version() == 2 && first < 0) first = r.step();
    }
    EXPECT_GT(first, 3) << id;  // warm-up + 3 steps of version 1 came first
    first_v2.insert(first);
    // Under version 2 the slow worker's compute matches the calibrated
    // prediction (the synthetic executor emulates the request's cluster, so
    // the factor is not applied twice).
    if (id == "w1") {
      double measured = 0, predicted = 0;
      for (const auto& r : reports) {
        if (r.plan_version() != 2) continue;
        for (const auto& t : r.timings()) {
          if (absl::StrContains(t.action(), "SEND") || absl::StrContains(t.action(), "RECV")) {
            continue;
          }
          measured += t.seconds();
          predicted += absl::StrContains(t.action(), "F") ? new_stage->forward_seconds()
                                                          : new_stage->backward_seconds();
        }
      }
      ASSERT_GT(predicted, 0);
      EXPECT_NEAR(measured / predicted, 1.0, 0.3);
    }
  }
  EXPECT_EQ(first_v2.size(), 1u) << "workers switched at different step boundaries";

  auto metrics = ScrapeMetrics((*planner)->metrics_port());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_NE(metrics->find("pipeplan_replans_total{reason=\"calibration\"} 1"), std::string::npos)
      << *metrics;
  EXPECT_NE(metrics->find("pipeplan_calibration_factor{device=\"gpu1\",job=\"" + job->id()),
            std::string::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

}  // namespace
}  // namespace pipeplan::testing
