// Elastic jobs (issue 10), end to end with real processes on 127.0.0.1:
// a kill -9 of one of 4 torch workers shrinks the job to 3 ranks with the
// same surviving processes and losses equal to an uninterrupted run rolled
// back to the checkpoint, a restart grows it back to 4; a planner killed for
// 3 leases leaves training running and loses no report; --max-steps
// completes the job with nobody lost; a duplicate worker id is refused;
// SIGTERM is a graceful leave (the others go on, zero steps lost); a version
// published at the end does not hold the job.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "pipeplan/convert/proto_convert.h"
#include "planner_process.h"
#include "synthetic_job.h"
#include "torch_job.h"
#include "worker_process.h"

namespace pipeplan::testing {
namespace {

constexpr char kPython[] = PIPEPLAN_DEFAULT_PYTHON;

class ElasticTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef PIPEPLAN_TEST_WITH_TORCH
    GTEST_SKIP() << "pipeplan-worker was built without LibTorch";
#endif
    ASSERT_NO_FATAL_FAILURE(WriteGptFixtures(kPython, PIPEPLAN_SOURCE_DIR, dir_.path(), 4));
    auto planner = PlannerProcess::Start(PlannerFlags());
    ASSERT_TRUE(planner.ok()) << planner.status();
    planner_ = *std::move(planner);
    auto client = planner_->Client();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  std::string CreateJob(const std::vector<std::string>& extra) {
    return CreateTorchJob(PIPEPLAN_CLI_BIN, planner_->address(), dir_.path(), extra);
  }

  std::unique_ptr<WorkerProcess> StartWorker(const std::string& job, int r) {
    return StartTorchWorker(planner_->address(), dir_.path(), job, r, ++started_);
  }

  std::vector<v1::ReportStepRequest> Reports(const std::string& job) {
    auto r = client_->ListStepReports(job, 10'000);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    return {r->reports().begin(), r->reports().end()};
  }

  // step -> loss of the single-process reference trainer.
  std::map<int64_t, double> Reference(int steps) {
    return TorchJobReference(kPython, PIPEPLAN_SOURCE_DIR, dir_.path(), steps);
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  TempDir dir_;
  std::unique_ptr<PlannerProcess> planner_;
  std::unique_ptr<client::PlannerClient> client_;
  int started_ = 0;
};

// The first `event=step` of `version` in `w`'s output, or -1.
// The first version `w` ran a step of with a rank in a plan of `ranks`
// ranks, or -1. Version numbers are not assumed: a replan can publish
// another version of the same shape in between.
int64_t FirstVersionOnRanks(const WorkerProcess& w, int ranks) {
  for (absl::string_view line : absl::StrSplit(w.Output(), '\n')) {
    if (!absl::StrContains(line, "event=plan_switch ")) continue;
    std::map<std::string, std::string> kv;
    for (absl::string_view f : absl::StrSplit(line, ' ')) {
      const size_t eq = f.find('=');
      if (eq != absl::string_view::npos)
        kv[std::string(f.substr(0, eq))] = std::string(f.substr(eq + 1));
    }
    if (Int(kv["ranks"]) != ranks || Int(kv["rank"]) < 0) continue;
    if (FirstStepOf(w, Int(kv["plan_version"])) >= 0) return Int(kv["plan_version"]);
  }
  return -1;
}

// True once `w` reported a step >= `step` (within 240 s).
// SIGTERM to `w`, a graceful leave: it exits 0 within `timeout` after
// leaving at one step boundary. That step, or -1 (the test has failed).
int64_t LeaveStep(WorkerProcess& w, absl::Duration timeout) {
  w.Signal(SIGTERM);
  EXPECT_EQ(w.Wait(timeout), 0) << w.Output();
  const std::vector<std::string> left_at = w.Values("leave", "step");
  EXPECT_EQ(left_at.size(), 1u) << w.Output();
  return left_at.size() == 1 ? Int(left_at[0]) : -1;
}

bool ReachesStep(const WorkerProcess& w, int64_t step) {
  return WaitFor(
      [&] {
        const auto s = w.Values("step", "step");
        return !s.empty() && Int(s.back()) >= step;
      },
      absl::Seconds(240));
}

TEST_F(ElasticTrainingTest, KillNineShrinksToThreeRanksAndARestartGrowsBack) {
  // The job is stopped (SIGTERM to every worker) once the 4-rank version has
  // run a few steps, so it never ends before the restarted worker is back.
  constexpr int kEvery = 10;
  const std::string job = CreateJob({"--max-steps", "100000", "--checkpoint-dir", Path("ckpt"),
                                     "--checkpoint-every", absl::StrCat(kEvery)});
  ASSERT_FALSE(job.empty());
  std::vector<std::unique_ptr<WorkerProcess>> w;
  for (int r = 0; r < 4; ++r) w.push_back(StartWorker(job, r));
  // Kill rank 2 at a random step past the first checkpoints.
  const int64_t kill_at = 25 + static_cast<int64_t>(absl::ToUnixNanos(absl::Now()) % 40);
  ASSERT_TRUE(ReachesStep(*w[2], kill_at)) << w[2]->Output();
  w[2]->Signal(SIGKILL);
  const absl::Time killed = absl::Now();
  ASSERT_EQ(w[2]->Wait(absl::Seconds(10)), 128 + SIGKILL);
  int64_t last_before = -1;
  for (const auto& r : Reports(job)) {
    if (r.plan_version() == 1) last_before = std::max(last_before, r.step());
  }

  // Within 20 s the three survivors (the same processes) run version 2 on 3 ranks.
  const std::vector<int> survivors = {0, 1, 3};
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int r : survivors) {
          if (FirstStepOf(*w[r], 2) < 0) return false;
        }
        return true;
      },
      absl::Seconds(20)))
      << w[0]->Output() << w[3]->Output();
  const absl::Duration recovery = absl::Now() - killed;
  for (int r : survivors) {
    EXPECT_EQ(w[r]->Wait(absl::ZeroDuration()), -1) << "w" << r << " exited: " << w[r]->Output();
    EXPECT_TRUE(absl::StrContains(w[r]->Output(), "plan_version=2 rank=")) << w[r]->Output();
    EXPECT_TRUE(absl::StrContains(w[r]->Output(), "ranks=3")) << w[r]->Output();
  }
  auto v2 = client_->GetPlan(job, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  for (const auto& s : v2->plan().stages()) EXPECT_NE(s.device_id(), "cpu2");
  // Steps redone: the ranks restore the in-memory peer snapshots (every
  // step by default, docs/snapshots.md), not the last checkpoint: at most
  // the step the kill interrupted and the one before it.
  const int64_t resumed = FirstStepOf(*w[0], 2);
  EXPECT_LE(last_before + 1 - resumed, 2) << "resumed at " << resumed;
  EXPECT_TRUE(absl::StrContains(w[0]->Output(), "from=snapshot")) << w[0]->Output();
  std::cout << "recovery_seconds=" << absl::ToDoubleSeconds(recovery)
            << " steps_lost=" << last_before + 1 - resumed << "\n";

  // The killed worker comes back: the job grows to 4 ranks again.
  w[2] = StartWorker(job, 2);
  int64_t grown = -1;
  ASSERT_TRUE(WaitFor(
      [&] {
        grown = FirstVersionOnRanks(*w[2], 4);
        if (grown < 0) return false;
        const auto s = w[2]->Values("step", "step");
        return Int(s.back()) >= FirstStepOf(*w[2], grown) + 5;
      },
      absl::Seconds(60)))
      << w[2]->Output() << planner_->stderr_text();

  for (int r = 0; r < 4; ++r) w[r]->Signal(SIGTERM);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(w[r]->Wait(absl::Seconds(60)), 0) << w[r]->Output();
  // Every reported loss (steps run twice included) is the reference's.
  int64_t last = 0;
  for (const auto& r : Reports(job)) last = std::max(last, r.step());
  const std::map<int64_t, double> want = Reference(static_cast<int>(last + 1));
  int checked = 0;
  for (const auto& r : Reports(job)) {
    if (!r.has_loss()) continue;
    ASSERT_TRUE(want.contains(r.step())) << r.step();
    // float32 sums in another order on another split drift apart slowly:
    // 1e-4 relative over the first 250 steps (the kill, the rollback and the
    // shrunk job), 1e-3 after.
    const double tolerance = r.step() < 250 ? 1e-4 : 1e-3;
    EXPECT_NEAR(r.loss(), want.at(r.step()), tolerance * std::abs(want.at(r.step())))
        << "step " << r.step() << " of version " << r.plan_version();
    ++checked;
  }
  EXPECT_GE(checked, last);
  auto state = client_->GetJob(job);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->state(), v1::JOB_RUNNING) << state->failure_message();
}

// SIGTERM on one of 4 torch workers: every rank checkpoints the step where
// it leaves, the planner replans at once, and the three others (the same
// processes) resume on 3 ranks from that very step: no step lost, every loss
// the reference's. SIGTERM to the rest stops the job without failing it.
TEST_F(ElasticTrainingTest, SigtermLeavesAndTheOthersLoseNoStep) {
  constexpr int kEvery = 10;
  const std::string job = CreateJob({"--max-steps", "100000", "--checkpoint-dir", Path("ckpt"),
                                     "--checkpoint-every", absl::StrCat(kEvery)});
  ASSERT_FALSE(job.empty());
  std::vector<std::unique_ptr<WorkerProcess>> w;
  for (int r = 0; r < 4; ++r) w.push_back(StartWorker(job, r));
  const int64_t leave_after = 15 + static_cast<int64_t>(absl::ToUnixNanos(absl::Now()) % 10);
  ASSERT_TRUE(ReachesStep(*w[2], leave_after)) << w[2]->Output();
  const absl::Time sent = absl::Now();
  const int64_t left = LeaveStep(*w[2], absl::Seconds(60));
  ASSERT_GE(left, 0);

  const std::vector<int> stay = {0, 1, 3};
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int r : stay) {
          const auto s = w[r]->Values("step", "step");
          if (FirstStepOf(*w[r], 2) < 0 || Int(s.back()) < left + 5) return false;
        }
        return true;
      },
      absl::Seconds(60)))
      << w[0]->Output() << planner_->stderr_text();
  std::cout << "leave_to_first_step_seconds=" << absl::ToDoubleSeconds(absl::Now() - sent) << "\n";
  for (int r : stay) {
    EXPECT_EQ(w[r]->Wait(absl::ZeroDuration()), -1) << "w" << r << " exited: " << w[r]->Output();
    EXPECT_TRUE(absl::StrContains(w[r]->Output(), "ranks=3")) << w[r]->Output();
    EXPECT_EQ(FirstStepOf(*w[r], 2), left) << "steps lost\n" << w[r]->Output();
  }
  for (int r : stay) w[r]->Signal(SIGTERM);
  for (int r : stay) EXPECT_EQ(w[r]->Wait(absl::Seconds(60)), 0) << w[r]->Output();

  int64_t last = 0;
  for (const auto& r : Reports(job)) last = std::max(last, r.step());
  const std::map<int64_t, double> want = Reference(static_cast<int>(last + 1));
  int checked = 0;
  for (const auto& r : Reports(job)) {
    if (!r.has_loss()) continue;
    ASSERT_TRUE(want.contains(r.step())) << r.step();
    EXPECT_NEAR(r.loss(), want.at(r.step()), 1e-4 * std::abs(want.at(r.step())))
        << "step " << r.step() << " of version " << r.plan_version();
    ++checked;
  }
  EXPECT_GE(checked, last);
  auto state = client_->GetJob(job);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->state(), v1::JOB_RUNNING) << state->failure_message();
  for (const auto& ws : state->workers()) {
    EXPECT_EQ(ws.state(), v1::WORKER_LEFT) << ws.info().worker_id();
  }
}

TEST_F(ElasticTrainingTest, MaxStepsCompletesTheJobAndNobodyIsLost) {
  const std::string job = CreateJob({"--max-steps", "50"});
  ASSERT_FALSE(job.empty());
  std::vector<std::unique_ptr<WorkerProcess>> w;
  for (int r = 0; r < 4; ++r) w.push_back(StartWorker(job, r));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(w[r]->Wait(absl::Seconds(240)), 0) << w[r]->Output();
  auto state = client_->GetJob(job);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->state(), v1::JOB_COMPLETED) << state->failure_message();
  // Well past the lease, nobody is lost.
  absl::SleepFor(absl::Seconds(2 * kLeaseSeconds + 1));
  auto metrics = ScrapeMetrics(planner_->metrics_port());
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_TRUE(absl::StrContains(*metrics, "pipeplan_workers{state=\"lost\"} 0")) << *metrics;
  auto after = client_->GetJob(job);
  ASSERT_TRUE(after.ok());
  for (const auto& ws : after->workers()) {
    EXPECT_EQ(ws.state(), v1::WORKER_DONE) << ws.info().worker_id();
  }
}

// A 5 s lease here, not kLeaseSeconds: in one clean-clone run two of the
// four workers heartbeated to the restarted planner only 8.9 s after it
// started, both in the same millisecond, past a 2 s lease's grace of two
// leases (not root-caused; 8 runs on an idle machine and every earlier CI
// run reconnected within about a second). The outage is still three
// leases, so without the grace every worker would be lost.
constexpr int kOutageLeaseSeconds = 5;

TEST(ElasticPlannerOutage, TrainingGoesOnAndEveryReportIsStoredOnce) {
  SyntheticJob c;
  ASSERT_NO_FATAL_FAILURE(c.Start({"--lease-seconds", absl::StrCat(kOutageLeaseSeconds)}));
  std::vector<std::unique_ptr<WorkerProcess>> w;
  for (int r = 0; r < 4; ++r) w.push_back(c.Worker(absl::StrCat("w", r), c.devices[r]));
  auto steps_of = [&](int r) { return static_cast<int64_t>(w[r]->Values("step", "step").size()); };
  ASSERT_TRUE(WaitFor([&] { return steps_of(0) >= 5; }, absl::Seconds(60))) << w[0]->Output();

  const int port = c.planner->port();
  c.planner->Signal(SIGKILL);
  c.planner->Wait(absl::Seconds(10));
  const int64_t before = steps_of(0);
  absl::SleepFor(absl::Seconds(3 * kOutageLeaseSeconds));
  const int64_t during = steps_of(0) - before;
  EXPECT_GT(during, 3) << "steps must go on while the planner is down\n" << w[0]->Output();

  auto back = PlannerProcess::Start(
      PlannerFlags({"--data-dir", c.data.path(), "--listen", absl::StrCat("127.0.0.1:", port),
                    "--lease-seconds", absl::StrCat(kOutageLeaseSeconds)}));
  ASSERT_TRUE(back.ok()) << back.status();
  c.planner = *std::move(back);
  auto client = c.planner->Client();
  ASSERT_TRUE(client.ok());
  c.client = *std::move(client);
  // Run past the grace period, then stop the whole job (every worker leaves).
  absl::SleepFor(absl::Seconds(2 * kOutageLeaseSeconds + 1));
  for (int r = 0; r < 4; ++r) w[r]->Signal(SIGTERM);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(w[r]->Wait(absl::Seconds(60)), 0) << w[r]->Output();

  auto job = c.client->GetJob(c.job);
  ASSERT_TRUE(job.ok());
  for (const auto& ws : job->workers()) {
    EXPECT_NE(ws.state(), v1::WORKER_LOST) << ws.info().worker_id();
  }
  EXPECT_FALSE(absl::StrContains(c.planner->stderr_text(), "event=worker_lost"))
      << c.planner->stderr_text() << w[0]->Output() << w[2]->Output();
  auto reports = c.client->ListStepReports(c.job, 10'000);
  ASSERT_TRUE(reports.ok());
  std::map<std::string, std::set<int64_t>> seqs;
  std::map<std::string, int64_t> count;
  for (const auto& r : reports->reports()) {
    EXPECT_TRUE(seqs[r.worker_id()].insert(r.seq()).second)
        << r.worker_id() << " seq " << r.seq() << " stored twice";
    ++count[r.worker_id()];
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(count[absl::StrCat("w", r)], steps_of(r)) << "w" << r << " lost reports";
  }
}

// The planner restarts while three of four workers wait in the rendezvous
// for the fourth, and the keys they wrote are gone with it: the rendezvous
// still completes once the fourth comes, long before the 60 s connect
// timeout (a round that needs a lost key ends at once and the next begins).
TEST(ElasticPlannerOutage, ARestartDuringTheRendezvousCostsOnlyANewRound) {
  SyntheticJob c;
  ASSERT_NO_FATAL_FAILURE(c.Start());
  std::vector<std::unique_ptr<WorkerProcess>> w;
  for (int r = 0; r < 3; ++r) {
    w.push_back(c.Worker(absl::StrCat("w", r), c.devices[r], {"--connect-timeout-seconds", "60"}));
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        for (auto& p : w) {
          if (p->Values("registered", "rank").empty()) return false;
        }
        return true;
      },
      absl::Seconds(30)));
  absl::SleepFor(absl::Seconds(1));  // into the rendezvous round
  const int port = c.planner->port();
  c.planner->Signal(SIGKILL);
  c.planner->Wait(absl::Seconds(10));
  auto back = PlannerProcess::Start(
      PlannerFlags({"--data-dir", c.data.path(), "--listen", absl::StrCat("127.0.0.1:", port)}));
  ASSERT_TRUE(back.ok()) << back.status();
  c.planner = *std::move(back);
  const absl::Time restarted = absl::Now();
  w.push_back(c.Worker("w3", c.devices[3], {"--connect-timeout-seconds", "60"}));
  const bool trained = WaitFor(
      [&] {
        for (auto& p : w) {
          if (p->Values("step", "step").empty()) return false;
        }
        return true;
      },
      absl::Seconds(40));
  ASSERT_TRUE(trained) << w[0]->Output() << w[3]->Output() << c.planner->stderr_text();
  const absl::Duration took = absl::Now() - restarted;
  std::cout << "restart_to_first_step_seconds=" << absl::ToDoubleSeconds(took) << "\n";
  EXPECT_LT(took, absl::Seconds(40));
}

TEST(ElasticIdentity, ASecondWorkerWithTheSameIdIsRefusedAtOnce) {
  SyntheticJob c;
  ASSERT_NO_FATAL_FAILURE(c.Start());
  auto first = c.Worker("w0", c.devices[0]);
  ASSERT_TRUE(
      WaitFor([&] { return !first->Values("registered", "rank").empty(); }, absl::Seconds(30)))
      << first->Output();
  const absl::Time t0 = absl::Now();
  auto second = c.Worker("w0", c.devices[1]);
  const int code = second->Wait(absl::Seconds(15));
  EXPECT_NE(code, 0) << second->Output();
  EXPECT_NE(code, -1) << "still running: " << second->Output();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  EXPECT_TRUE(absl::StrContains(second->Output(), "ALREADY_EXISTS") ||
              absl::StrContains(second->Output(), "already registered"))
      << second->Output();
  auto job = c.client->GetJob(c.job);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(job->workers_size(), 1);
  EXPECT_EQ(job->workers(0).info().device_id(), c.devices[0]);
}

// SIGTERM on one worker (a pod eviction, `systemctl stop` of one host) is a
// graceful leave: it exits 0 at a step boundary and is LEFT, never lost; the
// planner replans over the others at once (no lease wait); they are the
// same processes and go on from the step where it left. SIGTERM to all of
// them then stops the job cleanly without failing it.
TEST(ElasticLeave, SigtermOnOneWorkerLeavesAndTheOthersGoOn) {
  SyntheticJob c;
  // Only a plan without a device (infinitely better than one that cannot
  // run) passes this gain: no calibration replan comes in between.
  ASSERT_NO_FATAL_FAILURE(c.Start({"--replan-min-gain", "0.99"}));
  std::vector<std::unique_ptr<WorkerProcess>> w;
  for (int r = 0; r < 4; ++r) w.push_back(c.Worker(absl::StrCat("w", r), c.devices[r]));
  ASSERT_TRUE(WaitFor([&] { return w[0]->Values("step", "step").size() >= 5; }, absl::Seconds(60)))
      << w[0]->Output();

  const absl::Time sent = absl::Now();
  const int64_t left = LeaveStep(*w[2], absl::Seconds(20));
  ASSERT_GE(left, 0);
  const std::vector<int> stay = {0, 1, 3};
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int r : stay) {
          if (FirstStepOf(*w[r], 2) < 0) return false;
        }
        return true;
      },
      absl::Seconds(20)))
      << w[0]->Output() << c.planner->stderr_text();
  const absl::Duration recovery = absl::Now() - sent;
  std::cout << "leave_to_first_step_seconds=" << absl::ToDoubleSeconds(recovery) << "\n";
  for (int r : stay) {
    EXPECT_EQ(w[r]->Wait(absl::ZeroDuration()), -1) << "w" << r << " exited: " << w[r]->Output();
    EXPECT_TRUE(absl::StrContains(w[r]->Output(), "event=peer_left")) << w[r]->Output();
    EXPECT_TRUE(absl::StrContains(w[r]->Output(), "ranks=3")) << w[r]->Output();
    // No step lost: the first step of version 2 is the one after the leave.
    EXPECT_EQ(FirstStepOf(*w[r], 2), left) << w[r]->Output();
  }
  auto v2 = c.client->GetPlan(c.job, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_TRUE(absl::StrContains(v2->reason(), "w2 left")) << v2->reason();
  for (const auto& st : v2->plan().stages()) EXPECT_NE(st.device_id(), c.devices[2]);
  auto job = c.client->GetJob(c.job);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_RUNNING);
  for (const auto& ws : job->workers()) {
    EXPECT_EQ(ws.state(), ws.info().worker_id() == "w2" ? v1::WORKER_LEFT : v1::WORKER_ACTIVE)
        << ws.info().worker_id();
  }

  // The whole job stopped: every worker exits 0, the job is not failed and
  // nobody is lost, well past the lease.
  for (int r : stay) w[r]->Signal(SIGTERM);
  for (int r : stay) EXPECT_EQ(w[r]->Wait(absl::Seconds(30)), 0) << w[r]->Output();
  absl::SleepFor(absl::Seconds(2 * kLeaseSeconds + 1));
  job = c.client->GetJob(c.job);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_RUNNING) << job->failure_message();
  for (const auto& ws : job->workers()) {
    EXPECT_EQ(ws.state(), v1::WORKER_LEFT) << ws.info().worker_id();
  }
  EXPECT_FALSE(absl::StrContains(c.planner->stderr_text(), "worker_lost"))
      << c.planner->stderr_text();
}

// A second SIGTERM does not wait for a step boundary: a worker stuck in its
// rendezvous (its peers never came) exits at once with 128 + SIGTERM.
TEST(ElasticLeave, ASecondSigtermExitsAtOnce) {
  SyntheticJob c;
  ASSERT_NO_FATAL_FAILURE(c.Start());
  auto w0 = c.Worker("w0", c.devices[0]);
  ASSERT_TRUE(WaitFor([&] { return !w0->Values("registered", "rank").empty(); }, absl::Seconds(30)))
      << w0->Output();
  absl::SleepFor(absl::Milliseconds(300));  // into the rendezvous
  w0->Signal(SIGTERM);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(w0->Wait(absl::ZeroDuration()), -1) << "the first SIGTERM waits for the rendezvous";
  const absl::Time sent = absl::Now();
  w0->Signal(SIGTERM);
  EXPECT_EQ(w0->Wait(absl::Seconds(5)), 128 + SIGTERM) << w0->Output();
  EXPECT_LT(absl::Now() - sent, absl::Seconds(5));
}

// A worker that hangs (SIGSTOP) closes no socket, so no error reaches the
// ranks waiting on it before the 60 s comm timeout. The planner declares it
// lost after its lease and publishes version 2 without its device; the
// others' stall watch then aborts their waits on the stalled version 1 and
// they train on version 2 long before the comm timeout would have ended
// the waits.
TEST(ElasticHang, AStoppedWorkerIsReplannedAroundBeforeTheCommTimeout) {
  SyntheticJob c;
  ASSERT_NO_FATAL_FAILURE(c.Start({"--replan-min-gain", "0.99"}));
  std::vector<std::unique_ptr<WorkerProcess>> w;
  for (int r = 0; r < 4; ++r) {
    w.push_back(c.Worker(absl::StrCat("w", r), c.devices[r], {"--comm-timeout-seconds", "60"}));
  }
  ASSERT_TRUE(WaitFor([&] { return w[0]->Values("step", "step").size() >= 5; }, absl::Seconds(60)))
      << w[0]->Output();

  const absl::Time stopped = absl::Now();
  w[2]->Signal(SIGSTOP);
  const std::vector<int> stay = {0, 1, 3};
  const bool recovered = WaitFor(
      [&] {
        for (int r : stay) {
          if (FirstStepOf(*w[r], 2) < 0) return false;
        }
        return true;
      },
      absl::Seconds(40));
  const absl::Duration recovery = absl::Now() - stopped;
  w[2]->Signal(SIGKILL);
  ASSERT_TRUE(recovered) << w[0]->Output() << c.planner->stderr_text();
  std::cout << "hang_to_first_step_seconds=" << absl::ToDoubleSeconds(recovery) << "\n";
  EXPECT_LT(recovery, absl::Seconds(40));
  int aborted = 0;
  for (int r : stay) {
    EXPECT_EQ(w[r]->Wait(absl::ZeroDuration()), -1) << "w" << r << " exited: " << w[r]->Output();
    EXPECT_TRUE(absl::StrContains(w[r]->Output(), "ranks=3")) << w[r]->Output();
    aborted += absl::StrContains(w[r]->Output(), "event=stall_abort") ? 1 : 0;
  }
  // The hung rank's neighbours had nothing else to end their wait.
  EXPECT_GE(aborted, 1);
  auto v2 = c.client->GetPlan(c.job, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  for (const auto& st : v2->plan().stages()) EXPECT_NE(st.device_id(), c.devices[2]);
}

// A version published while the running one trains its last step never
// runs: the job still completes when that version's ranks finish, and a
// worker that has a rank only in the new version exits 0 instead of waiting
// for peers that are gone.
TEST(ElasticCompletion, AVersionPublishedAtTheEndDoesNotHoldTheJob) {
  SyntheticJob c;
  // No policy replans: the test publishes version 2 itself.
  ASSERT_NO_FATAL_FAILURE(c.Start({"--replan", "off"}, /*ranks=*/2));
  ASSERT_GT(c.step_seconds, 0);
  // Steps of ~1.5 s, so version 2 lands inside the last one.
  const std::string scale = absl::StrCat(1.5 / c.step_seconds);
  constexpr int kSteps = 4;
  std::vector<std::unique_ptr<WorkerProcess>> w;
  for (int r = 0; r < 2; ++r) {
    w.push_back(c.Worker(absl::StrCat("w", r), c.devices[r],
                         {"--time-scale", scale, "--steps", absl::StrCat(kSteps)}));
  }
  auto extra =
      c.Worker("w2", c.spare_devices[0], {"--time-scale", scale, "--connect-timeout-seconds", "5"});
  ASSERT_TRUE(
      WaitFor([&] { return !extra->Values("registered", "rank").empty(); }, absl::Seconds(30)))
      << extra->Output();
  ASSERT_TRUE(WaitFor(
      [&] {
        const auto s = w[0]->Values("step", "step");
        return !s.empty() && Int(s.back()) >= kSteps - 2;
      },
      absl::Seconds(60)))
      << w[0]->Output();
  v1::ReplanJobRequest replan;
  replan.set_job_id(c.job);
  replan.mutable_options()->set_num_ranks(3);
  replan.mutable_options()->set_max_replicas(1);
  auto v2 = c.client->ReplanJob(replan);
  ASSERT_TRUE(v2.ok()) << v2.status();
  bool ranks_w2 = false;
  for (const auto& st : v2->plan().stages()) ranks_w2 |= st.device_id() == c.spare_devices[0];
  ASSERT_TRUE(ranks_w2) << "version 2 must give w2 a rank";

  for (int r = 0; r < 2; ++r) EXPECT_EQ(w[r]->Wait(absl::Seconds(30)), 0) << w[r]->Output();
  // Its rendezvous for version 2 gives up after 3 connect timeouts.
  EXPECT_EQ(extra->Wait(absl::Seconds(60)), 0) << extra->Output();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(absl::StrContains(w[r]->Output(), "plan_version=2 rank="))
        << "version 2 must come too late to run\n"
        << w[r]->Output();
  }
  EXPECT_TRUE(absl::StrContains(extra->Output(), "event=job_completed")) << extra->Output();
  auto job = c.client->GetJob(c.job);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_COMPLETED) << job->failure_message();
  EXPECT_EQ(job->plan_version(), 2);
  for (const auto& ws : job->workers()) {
    EXPECT_EQ(ws.state(), v1::WORKER_DONE) << ws.info().worker_id();
  }
}

}  // namespace
}  // namespace pipeplan::testing
