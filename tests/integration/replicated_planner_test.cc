// Replicated planners on one PostgreSQL (issue 15), real processes: a
// PostgreSQL server the test starts, three pipeplan-planner replicas and
// four synthetic pipeplan-worker processes on 127.0.0.1. Each worker is
// given all three replicas (in a different order, so all three serve the
// job); kill -9 of the job's owner moves the job to another replica within
// its lease, training goes on, no plan version is lost or duplicated and no
// report is stored twice. And the operator's check with the CLI.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner_process.h"
#include "support/postgres_server.h"
#include "worker_process.h"

namespace pipeplan::testing {
namespace {

constexpr int kJobLeaseSeconds = 2;

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

int64_t Int(const std::string& s) {
  int64_t v = -1;
  return absl::SimpleAtoi(s, &v) ? v : -1;
}

class ReplicatedPlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = PostgresServer::Start();
    if (!server.ok() && server.status().code() == absl::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << "needs Debian's PostgreSQL binaries (postgresql-15): " << server.status();
    }
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto url = server_->CreateDatabase("pipeplan");
    ASSERT_TRUE(url.ok()) << url.status();
    for (int i = 0; i < 3; ++i) {
      auto p =
          PlannerProcess::Start({"--store", *url, "--lease-seconds", "2", "--job-lease-seconds",
                                 absl::StrCat(kJobLeaseSeconds), "--replan", "off"});
      ASSERT_TRUE(p.ok()) << p.status();
      planners_.push_back(*std::move(p));
    }
  }
  // Replica i's address list, starting with i.
  std::string Addresses(int first) const {
    std::vector<std::string> out;
    for (int i = 0; i < 3; ++i) out.push_back(planners_[(first + i) % 3]->address());
    return absl::StrJoin(out, ",");
  }
  bool Owns(int replica, const std::string& job) const {
    return absl::StrContains(planners_[replica]->stderr_text(),
                             absl::StrCat("event=job_owned job=", job));
  }

  std::unique_ptr<PostgresServer> server_;
  std::vector<std::unique_ptr<PlannerProcess>> planners_;
  TempDir dir_;
};

TEST_F(ReplicatedPlannerTest, KillNineOfTheOwnerMovesTheJobAndTrainingGoesOn) {
  auto ca = planners_[0]->Client();
  ASSERT_TRUE(ca.ok());
  v1::PlanRequest r = SmallRequest();
  r.mutable_options()->set_num_ranks(4);
  r.mutable_options()->set_max_replicas(1);
  auto created = (*ca)->CreateJob("replicated", r);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string job = created->id();
  ASSERT_TRUE(Owns(0, job)) << planners_[0]->stderr_text();

  std::vector<std::unique_ptr<WorkerProcess>> w;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> args = WorkerArgs(Addresses(i % 3), job, absl::StrCat("w", i),
                                               created->plan().stages(i).device_id());
    for (const char* a : {"--time-scale", "0.2"}) args.push_back(a);
    w.push_back(std::make_unique<WorkerProcess>(dir_.path(), absl::StrCat("w", i), args));
  }
  auto steps_of = [&](int i) { return static_cast<int64_t>(w[i]->Values("step", "step").size()); };
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(WaitFor([&] { return steps_of(i) >= 5; }, absl::Seconds(60))) << w[i]->Output();
  }

  // kill -9 the owner: another replica claims the job within the lease.
  planners_[0]->Signal(SIGKILL);
  planners_[0]->Wait(absl::Seconds(10));
  const absl::Time killed = absl::Now();
  std::vector<int64_t> before;
  for (int i = 0; i < 4; ++i) before.push_back(steps_of(i));
  ASSERT_TRUE(
      WaitFor([&] { return Owns(1, job) || Owns(2, job); }, absl::Seconds(kJobLeaseSeconds + 5)));
  const absl::Duration failover = absl::Now() - killed;
  std::cout << "failover_seconds=" << absl::ToDoubleSeconds(failover) << "\n";
  EXPECT_LE(failover, absl::Seconds(kJobLeaseSeconds + 2));
  const int next = Owns(1, job) ? 1 : 2;

  // Training went on through the kill and goes on.
  absl::SleepFor(absl::Seconds(3));
  for (int i = 0; i < 4; ++i) {
    EXPECT_GT(steps_of(i) - before[i], 3) << "w" << i << "\n" << w[i]->Output();
  }

  // The operator replans through the other survivor: version 2 reaches
  // every worker, whichever replica it watches.
  const int other = next == 1 ? 2 : 1;
  std::string out;
  ASSERT_EQ(RunCommand({PIPEPLAN_CLI_BIN, "--planner", planners_[other]->address(), "jobs",
                        "replan", job, "--ranks", "4"},
                       &out),
            0)
      << out << planners_[other]->stderr_text();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(WaitFor(
        [&] {
          for (const std::string& v : w[i]->Values("step", "plan_version")) {
            if (Int(v) == 2) return true;
          }
          return false;
        },
        absl::Seconds(60)))
        << "w" << i << "\n"
        << w[i]->Output();
  }
  auto cb = planners_[next]->Client();
  ASSERT_TRUE(cb.ok());
  // Versions 1 and 2, once each, none beyond.
  for (int64_t v : {1, 2}) {
    auto p = (*cb)->GetPlan(job, v);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->version(), v);
  }
  EXPECT_EQ((*cb)->GetPlan(job, 3).status().code(), absl::StatusCode::kNotFound);

  // Stopping every worker (SIGTERM: each leaves the job) ends them all with
  // exit 0, and nobody is lost.
  for (int i = 0; i < 4; ++i) w[i]->Signal(SIGTERM);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w[i]->Wait(absl::Seconds(60)), 0) << w[i]->Output();
  auto seen = (*cb)->GetJob(job);
  ASSERT_TRUE(seen.ok());
  for (const auto& ws : seen->workers()) {
    EXPECT_NE(ws.state(), v1::WORKER_LOST) << ws.info().worker_id();
  }
  // Each worker's versions only go up: 1, then 2.
  for (int i = 0; i < 4; ++i) {
    int64_t last = 0;
    for (const std::string& v : w[i]->Values("step", "plan_version")) {
      EXPECT_GE(Int(v), last) << "w" << i;
      last = Int(v);
    }
  }
  // Every step's report stored exactly once.
  auto reports = (*cb)->ListStepReports(job, 10'000);
  ASSERT_TRUE(reports.ok());
  std::map<std::string, std::set<int64_t>> seqs;
  std::map<std::string, int64_t> count;
  for (const auto& rep : reports->reports()) {
    EXPECT_TRUE(seqs[rep.worker_id()].insert(rep.seq()).second)
        << rep.worker_id() << " seq " << rep.seq() << " stored twice";
    ++count[rep.worker_id()];
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(count[absl::StrCat("w", i)], steps_of(i)) << "w" << i << " lost reports";
  }
}

// The check an operator runs: a job created on A is seen on B; after A's
// kill -9 and its lease, a replan on B publishes version 2.
TEST_F(ReplicatedPlannerTest, CreateOnAReplanOnBAfterAIsKilled) {
  std::string out;
  ASSERT_EQ(RunCommand({PIPEPLAN_CLI_BIN, "--planner", planners_[0]->address(), "jobs", "create",
                        "--name", "cli", "--graph", DataPath("chain_small.json"), "--cluster",
                        DataPath("cluster_8xa100.json"), "--ranks", "4", "--json"},
                       &out),
            0)
      << out;
  const size_t at = out.find("job-");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string job = out.substr(at, out.find('"', at) - at);
  ASSERT_EQ(RunCommand({PIPEPLAN_CLI_BIN, "--planner", planners_[1]->address(), "jobs", "show", job,
                        "--json"},
                       &out),
            0)
      << out;
  EXPECT_TRUE(absl::StrContains(out, "\"cli\"")) << out;

  planners_[0]->Signal(SIGKILL);
  planners_[0]->Wait(absl::Seconds(10));
  absl::SleepFor(absl::Seconds(kJobLeaseSeconds + 1));
  ASSERT_EQ(RunCommand({PIPEPLAN_CLI_BIN, "--planner", planners_[1]->address(), "jobs", "replan",
                        job, "--stages", "2"},
                       &out),
            0)
      << out;
  auto cb = planners_[2]->Client();
  ASSERT_TRUE(cb.ok());
  auto v2 = (*cb)->GetPlan(job, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version(), 2);
  EXPECT_EQ(v2->plan().stages_size(), 2);
}

}  // namespace
}  // namespace pipeplan::testing
