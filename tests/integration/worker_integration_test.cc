// End to end: a real pipeplan-planner and 2 or 4 pipeplan-worker processes on
// 127.0.0.1 (Gloo over TCP, synthetic or mlp executor). Workers rendezvous
// through the planner, run steps, report per-action timings, switch to a new
// plan version at a step boundary after ReplanJob, and stop together.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "planner_process.h"
#include "worker_process.h"

namespace pipeplan::testing {
namespace {

// `replicas` pipelines of `stages` ranks on the 8-device cluster (fixed, so
// that the test starts a worker for every device of the plan).
v1::PlanRequest JobRequest(int stages, int microbatches, int replicas = 1) {
  v1::PlanRequest r = SmallRequest();
  r.mutable_options()->set_num_ranks(stages);
  r.mutable_options()->set_num_replicas(replicas);
  r.mutable_options()->set_microbatches(microbatches);
  return r;
}

// Every device of the plan, replica by replica (replica 0 first).
std::vector<std::string> PlanDevices(const v1::Plan& plan) {
  std::vector<std::string> d;
  for (const v1::Replica& q : plan.replicas()) {
    d.insert(d.end(), q.rank_device_ids().begin(), q.rank_device_ids().end());
  }
  if (d.empty()) {
    for (const v1::Stage& s : plan.stages()) {
      if (std::find(d.begin(), d.end(), s.device_id()) == d.end()) d.push_back(s.device_id());
    }
  }
  return d;
}

std::vector<std::string> RankDevices(const v1::Plan& plan) {
  std::vector<std::string> d;
  for (const v1::Stage& s : plan.stages()) {
    if (std::find(d.begin(), d.end(), s.device_id()) == d.end()) d.push_back(s.device_id());
  }
  return d;
}

struct Cluster {
  std::unique_ptr<PlannerProcess> planner;
  std::unique_ptr<client::PlannerClient> client;
  v1::Job job;
  TempDir dir;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
};

void StartJob(Cluster* c, int stages, int microbatches, std::vector<std::string> extra,
              int metrics_worker = -1, int replicas = 1) {
  // The replanning policy is off: these tests publish versions themselves
  // (replan_integration_test.cc covers the policy).
  auto planner = PlannerProcess::Start({"--lease-seconds", "5", "--replan", "off"});
  ASSERT_TRUE(planner.ok()) << planner.status();
  c->planner = std::move(*planner);
  auto client = c->planner->Client();
  ASSERT_TRUE(client.ok());
  c->client = std::move(*client);
  auto job = c->client->CreateJob("workers", JobRequest(stages, microbatches, replicas));
  ASSERT_TRUE(job.ok()) << job.status();
  c->job = *job;
  ASSERT_EQ(static_cast<int>(RankDevices(job->plan()).size()), stages);
  const std::vector<std::string> devices = PlanDevices(job->plan());
  ASSERT_EQ(static_cast<int>(devices.size()), stages * replicas);
  for (int r = 0; r < stages * replicas; ++r) {
    std::vector<std::string> args =
        WorkerArgs(c->planner->address(), job->id(), absl::StrCat("w", r), devices[r]);
    if (r == metrics_worker) {
      args.push_back("--metrics-listen");
      args.push_back("127.0.0.1:0");
    }
    args.insert(args.end(), extra.begin(), extra.end());
    c->workers.push_back(
        std::make_unique<WorkerProcess>(c->dir.path(), absl::StrCat("w", r), args));
  }
}

std::map<std::string, std::vector<v1::ReportStepRequest>> ReportsByWorker(Cluster& c) {
  std::map<std::string, std::vector<v1::ReportStepRequest>> out;
  auto reports = c.client->ListStepReports(c.job.id(), 10'000);
  EXPECT_TRUE(reports.ok()) << reports.status();
  if (!reports.ok()) return out;
  for (const auto& r : reports->reports()) out[r.worker_id()].push_back(r);
  for (auto& [w, v] : out) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.step() < b.step(); });
  }
  return out;
}

// The action names in a report, without stage/microbatch: "F", "SEND_F", ...
std::set<std::string> ActionKinds(const v1::ReportStepRequest& r) {
  std::set<std::string> kinds;
  for (const auto& t : r.timings()) {
    std::string a = t.action();
    a.erase(0, a.find_first_not_of("0123456789"));
    a.erase(a.find_last_not_of("0123456789") + 1);
    kinds.insert(a);
    EXPECT_GE(t.seconds(), 0) << t.action();
  }
  return kinds;
}

TEST(WorkerIntegration, TwoWorkersRunStepsAndReportTimings) {
  Cluster c;
  ASSERT_NO_FATAL_FAILURE(StartJob(&c, 2, 4, {"--steps", "3", "--time-scale", "0.2"}));
  for (auto& w : c.workers) {
    ASSERT_EQ(w->Wait(absl::Seconds(30)), 0) << w->Output();
  }
  auto by_worker = ReportsByWorker(c);
  ASSERT_EQ(by_worker.size(), 2u);
  for (auto& [id, reports] : by_worker) {
    ASSERT_EQ(reports.size(), 3u) << id;
    for (int s = 0; s < 3; ++s) {
      const auto& r = reports[s];
      EXPECT_EQ(r.step(), s);
      EXPECT_EQ(r.plan_version(), 1);
      EXPECT_GT(r.step_seconds(), 0);
      EXPECT_GT(r.peak_memory_bytes(), 0);
      // 1F1B, 4 microbatches: 4 F + 4 B + 4 sends + 4 receives per rank.
      EXPECT_EQ(r.timings_size(), 16);
      const std::set<std::string> kinds = ActionKinds(r);
      EXPECT_TRUE(kinds.contains("F") && kinds.contains("B")) << id;
      if (id == "w0") {
        EXPECT_EQ(kinds, (std::set<std::string>{"F", "B", "SEND_F", "RECV_B"}));
      } else {
        EXPECT_EQ(kinds, (std::set<std::string>{"F", "B", "RECV_F", "SEND_B"}));
      }
    }
  }
}

// Two replicas of a two-rank pipeline, synthetic executor: four workers
// rendezvous as one, each replica runs the pipeline, and the gradient
// all-reduce over each rank's replica group (a real buffer of the stages'
// parameter bytes) is part of every step.
TEST(WorkerIntegration, TwoReplicasOfTwoRanksRunTogether) {
  Cluster c;
  ASSERT_NO_FATAL_FAILURE(StartJob(&c, 2, 4, {"--steps", "4", "--time-scale", "0.2"},
                                   /*metrics_worker=*/-1, /*replicas=*/2));
  ASSERT_EQ(c.job.plan().replicas_size(), 2);
  for (auto& w : c.workers) ASSERT_EQ(w->Wait(absl::Seconds(60)), 0) << w->Output();
  auto by_worker = ReportsByWorker(c);
  ASSERT_EQ(by_worker.size(), 4u);
  std::set<std::pair<int, int>> reported;  // (replica, rank): jobs trace keeps them apart
  for (auto& [id, reports] : by_worker) {
    ASSERT_EQ(reports.size(), 4u) << id;
    for (const auto& r : reports) {
      EXPECT_EQ(r.timings_size(), 16) << id;  // each replica runs the whole 1F1B program
      EXPECT_GT(r.step_seconds(), 0) << id;
      EXPECT_EQ(r.replica(), reports.front().replica()) << id;
    }
    reported.insert({reports.front().replica(), reports.front().rank()});
  }
  EXPECT_EQ(reported, (std::set<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  for (int i = 0; i < 4; ++i) {
    const auto replica = c.workers[i]->Values("plan_switch", "replica");
    const auto rank = c.workers[i]->Values("plan_switch", "rank");
    ASSERT_EQ(replica.size(), 1u) << c.workers[i]->Output();
    EXPECT_EQ(replica[0], absl::StrCat(i / 2));
    EXPECT_EQ(rank[0], absl::StrCat(i % 2));
  }
}

TEST(WorkerIntegration, FourWorkersSwitchToVersionTwoAtAStepBoundary) {
  Cluster c;
  ASSERT_NO_FATAL_FAILURE(StartJob(&c, 4, 4, {"--time-scale", "0.2"}, /*metrics_worker=*/0));
  // Wait for 3 steps of version 1 from every worker.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  auto all_have = [&](int64_t version, int count) {
    auto by_worker = ReportsByWorker(c);
    if (by_worker.size() != 4) return false;
    for (auto& [id, reports] : by_worker) {
      if (std::count_if(reports.begin(), reports.end(),
                        [&](const auto& r) { return r.plan_version() == version; }) < count) {
        return false;
      }
    }
    return true;
  };
  while (!all_have(1, 3) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(all_have(1, 3)) << c.workers[0]->Output();

  v1::ReplanJobRequest replan;
  replan.set_job_id(c.job.id());
  *replan.mutable_options() = JobRequest(4, 8).options();  // same stages, 8 microbatches
  replan.set_reason("worker integration test");
  auto v2 = c.client->ReplanJob(replan);
  ASSERT_TRUE(v2.ok()) << v2.status();
  ASSERT_EQ(v2->version(), 2);
  while (!all_have(2, 2) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(all_have(2, 2)) << c.workers[0]->Output();

  // Metrics of worker 0 show version 2 and its steps.
  const std::vector<std::string> metrics_lines = [&] {
    std::vector<std::string> v;
    for (absl::string_view l : absl::StrSplit(c.workers[0]->Output(), '\n')) {
      if (absl::StartsWith(l, "metrics on ")) v.emplace_back(l.substr(11));
    }
    return v;
  }();
  ASSERT_EQ(metrics_lines.size(), 1u);
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(metrics_lines[0].substr(metrics_lines[0].rfind(':') + 1), &port));
  auto scraped = ScrapeMetrics(port);
  ASSERT_TRUE(scraped.ok()) << scraped.status();
  EXPECT_NE(scraped->find("pipeplan_worker_plan_version{"), std::string::npos);
  EXPECT_NE(scraped->find("pipeplan_worker_steps_total{"), std::string::npos);
  EXPECT_NE(scraped->find("pipeplan_worker_samples_per_second{"), std::string::npos);
  EXPECT_NE(scraped->find("pipeplan_worker_step_seconds_bucket{"), std::string::npos);
  EXPECT_NE(scraped->find("} 2\n"), std::string::npos) << *scraped;

  // SIGTERM to every worker (the whole job stopping) stops all of them at
  // the same step, cleanly.
  for (auto& w : c.workers) w->Signal(SIGTERM);
  for (auto& w : c.workers) ASSERT_EQ(w->Wait(absl::Seconds(20)), 0) << w->Output();

  auto by_worker = ReportsByWorker(c);
  std::set<int64_t> first_v2_steps, last_steps;
  for (auto& [id, reports] : by_worker) {
    int64_t first_v2 = -1;
    int64_t prev_version = 0;
    for (const auto& r : reports) {
      EXPECT_GE(r.plan_version(), prev_version) << id << " step " << r.step();
      prev_version = r.plan_version();
      if (r.plan_version() == 2 && first_v2 < 0) first_v2 = r.step();
      const std::set<std::string> kinds = ActionKinds(r);
      EXPECT_TRUE(kinds.contains("F") && kinds.contains("B")) << id;
      if (id == "w0") {
        EXPECT_TRUE(kinds.contains("SEND_F") && kinds.contains("RECV_B"));
      }
      if (id == "w3") {
        EXPECT_TRUE(kinds.contains("RECV_F") && kinds.contains("SEND_B"));
      }
      if (id == "w1" || id == "w2") {
        EXPECT_EQ(kinds.size(), 6u) << id;
      }
      // 8 microbatches in version 2: twice the actions of version 1.
      if (id == "w1") {
        EXPECT_EQ(r.timings_size(), r.plan_version() == 1 ? 24 : 48);
      }
    }
    first_v2_steps.insert(first_v2);
    last_steps.insert(reports.back().step());
    // The worker printed the switch.
    const auto from = c.workers[id[1] - '0']->Values("plan_switch", "from_version");
    EXPECT_NE(std::find(from.begin(), from.end(), "1"), from.end()) << id;
  }
  // Every worker switched at the same step boundary and stopped at the same step.
  EXPECT_EQ(first_v2_steps.size(), 1u);
  EXPECT_GT(*first_v2_steps.begin(), 2);
  EXPECT_EQ(last_steps.size(), 1u);
}

TEST(WorkerIntegration, MlpLossDecreasesAcrossTwoRanks) {
  Cluster c;
  ASSERT_NO_FATAL_FAILURE(StartJob(&c, 2, 4, {"--steps", "6", "--executor", "mlp"}));
  for (auto& w : c.workers) ASSERT_EQ(w->Wait(absl::Seconds(30)), 0) << w->Output();
  EXPECT_TRUE(c.workers[0]->Values("step", "loss").empty());  // only the last stage has a loss
  const std::vector<std::string> losses = c.workers[1]->Values("step", "loss");
  ASSERT_EQ(losses.size(), 6u) << c.workers[1]->Output();
  std::vector<double> l(losses.size());
  for (size_t i = 0; i < l.size(); ++i) ASSERT_TRUE(absl::SimpleAtod(losses[i], &l[i]));
  for (size_t i = 1; i < l.size(); ++i) EXPECT_LT(l[i], l[i - 1]) << "step " << i;
}

// The planner answers NOT_FOUND once the job is gone or cancelled (the watch
// stream ends with it, Heartbeat returns it); the worker decides by that code
// and exits 4 (pipeplan/common/exit_code.h), which its units do not restart.
void ExpectWorkerStopsWhenJobEnds(bool cancel) {
  Cluster c;
  ASSERT_NO_FATAL_FAILURE(StartJob(&c, 1, 2, {"--time-scale", "0.2"}));
  WorkerProcess& w = *c.workers[0];
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (w.Values("step", "step").empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_FALSE(w.Values("step", "step").empty()) << w.Output();
  if (cancel) {
    ASSERT_TRUE(c.client->CancelJob(c.job.id(), "test").ok());
  } else {
    ASSERT_TRUE(c.client->DeleteJob(c.job.id()).ok());
  }
  EXPECT_EQ(w.Wait(absl::Seconds(20)), 4) << w.Output();
  EXPECT_TRUE(absl::StrContains(w.Output(), "NOT_FOUND")) << w.Output();
  // It says which: a cancelled job's workers said "was deleted".
  EXPECT_TRUE(
      absl::StrContains(w.Output(), cancel ? "was cancelled (cancelled: test)" : "was deleted"))
      << w.Output();
  EXPECT_TRUE(w.Values("done", "steps").empty()) << w.Output();
  if (cancel) {  // still there, and says why
    auto job = c.client->GetJob(c.job.id());
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), v1::JOB_CANCELLED);
    EXPECT_EQ(job->failure_message(), "cancelled: test");
  }
}

TEST(WorkerIntegration, DeletedJobEndsItsWorkerWithExitCodeFour) {
  ExpectWorkerStopsWhenJobEnds(/*cancel=*/false);
}

TEST(WorkerIntegration, CancelledJobEndsItsWorkerWithExitCodeFour) {
  ExpectWorkerStopsWhenJobEnds(/*cancel=*/true);
}

TEST(WorkerIntegration, RendezvousKeyValueRpcs) {
  auto planner = PlannerProcess::Start({});
  ASSERT_TRUE(planner.ok()) << planner.status();
  auto client = (*planner)->Client();
  ASSERT_TRUE(client.ok());
  auto job = (*client)->CreateJob("kv", JobRequest(2, 4));
  ASSERT_TRUE(job.ok()) << job.status();
  auto missing = (*client)->RendezvousGet(job->id(), "v1/gloo/0");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->has_value());
  ASSERT_TRUE((*client)->RendezvousSet(job->id(), "v1/gloo/0", std::string("a\0b", 3)).ok());
  auto got = (*client)->RendezvousGet(job->id(), "v1/gloo/0");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(**got, std::string("a\0b", 3));
  EXPECT_EQ((*client)->RendezvousSet(job->id(), std::string(257, 'k'), "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*client)->RendezvousSet(job->id(), "", "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*client)->RendezvousGet("job-nope", "k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*client)->ListStepReports(job->id(), -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*client)->DeleteJob(job->id()).ok());
  EXPECT_EQ((*client)->RendezvousGet(job->id(), "v1/gloo/0").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pipeplan::testing
