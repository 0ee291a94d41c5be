// pipeplan-planner on PostgreSQL (--store postgres://...): a real server
// started by the test, planner processes on 127.0.0.1. A planner killed with
// SIGKILL loses nothing: a second planner process on the same database
// serves the job, its versions and its workers, and publishes the next
// version.
#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "planner_process.h"
#include "support/postgres_server.h"

namespace pipeplan::testing {
namespace {

#define ASSERT_OK_AND_ASSIGN(lhs, expr)            \
  auto lhs##_or = (expr);                          \
  ASSERT_TRUE(lhs##_or.ok()) << lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

class PostgresPlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = PostgresServer::Start();
    if (!server.ok() && server.status().code() == absl::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << server.status();
    }
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_OK_AND_ASSIGN(url, server_->CreateDatabase("pipeplan"));
    url_ = url;
  }
  std::unique_ptr<PlannerProcess> Planner() {
    auto p = PlannerProcess::Start({"--store", url_, "--lease-seconds", "2"});
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }
  std::unique_ptr<PostgresServer> server_;
  std::string url_;
};

TEST_F(PostgresPlannerTest, SecondPlannerTakesOverAfterAKill) {
  auto a = Planner();
  ASSERT_NE(a, nullptr);
  ASSERT_OK_AND_ASSIGN(ca, a->Client());
  ASSERT_OK_AND_ASSIGN(job, ca->CreateJob("on-postgres", SmallRequest()));
  v1::WorkerInfo w;
  w.set_worker_id("w0");
  w.set_device_id(job.plan().stages(0).device_id());
  w.set_host("127.0.0.1");
  ASSERT_TRUE(ca->RegisterWorker(job.id(), w).ok());
  a->Signal(SIGKILL);
  a->Wait(absl::Seconds(10));

  auto b = Planner();
  ASSERT_NE(b, nullptr);
  ASSERT_OK_AND_ASSIGN(cb, b->Client());
  ASSERT_OK_AND_ASSIGN(seen, cb->GetJob(job.id()));
  EXPECT_EQ(seen.name(), "on-postgres");
  EXPECT_EQ(seen.plan_version(), 1);
  ASSERT_EQ(seen.workers_size(), 1);
  EXPECT_EQ(seen.workers(0).info().worker_id(), "w0");

  // The operator's check: a replan on the surviving planner publishes v2.
  std::string out;
  ASSERT_EQ(RunCommand({PIPEPLAN_CLI_BIN, "--planner", b->address(), "jobs", "replan", job.id(),
                        "--ranks", "2"},
                       &out),
            0)
      << out;
  ASSERT_OK_AND_ASSIGN(v2, cb->GetPlan(job.id(), 2));
  EXPECT_EQ(v2.version(), 2);
  ASSERT_OK_AND_ASSIGN(v1again, cb->GetPlan(job.id(), 1));
  EXPECT_EQ(v1again.version(), 1);
}

TEST(PostgresPlanner, UnreachableDatabaseStopsStartUpWithTheReason) {
  auto p = PlannerProcess::Start({"--store", "postgresql:///x?host=/nonexistent-pipeplan"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("PostgreSQL"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace pipeplan::testing
