// What only the PostgreSQL store has to get right, against a real server
// started by the test: planners sharing one database (concurrent migrations,
// racing plan versions), and the status codes of a server that goes away.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/store/store.h"
#include "postgres_test_fixture.h"

namespace pipeplan::server {
namespace {

class PostgresStoreTest : public PostgresDatabaseTest {};

TEST_F(PostgresStoreTest, ReplicasStartingTogetherMigrateOnce) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      if (OpenPostgresStore(url_, {.connections = 1}).ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_NE(Open(), nullptr);  // and again, on a migrated database
}

// Two planners publish version 2 of one job at once: exactly one wins, the
// other gets FAILED_PRECONDITION (its version no longer follows).
TEST_F(PostgresStoreTest, RacingPlanVersionsOneWins) {
  std::unique_ptr<Store> a = Open();
  std::unique_ptr<Store> b = Open();
  ASSERT_TRUE(a && b);
  for (int job = 0; job < 20; ++job) {
    const std::string id = absl::StrCat("j", job);
    ASSERT_TRUE(a->CreateJob({id, "race", 1, 1}, Version(id, 1, "created")).ok());
    absl::Status sa, sb;
    std::thread ta([&] { sa = a->AppendPlan(Version(id, 2, "a")); });
    std::thread tb([&] { sb = b->AppendPlan(Version(id, 2, "b")); });
    ta.join();
    tb.join();
    ASSERT_NE(sa.ok(), sb.ok()) << sa << " / " << sb;
    const absl::Status& loser = sa.ok() ? sb : sa;
    EXPECT_TRUE(loser.code() == absl::StatusCode::kFailedPrecondition ||
                loser.code() == absl::StatusCode::kAlreadyExists)
        << loser;
    auto v2 = b->GetPlan(id, 2);
    ASSERT_TRUE(v2.ok());
    EXPECT_EQ(v2->reason(), sa.ok() ? "a" : "b");
  }
}

TEST_F(PostgresStoreTest, RefusesADatabaseOfANewerPlanner) {
  ASSERT_NE(Open(), nullptr);
  ASSERT_TRUE(server_->RunSql(database_, "INSERT INTO schema_migrations VALUES (999, 0)").ok());
  auto s = OpenPostgresStore(url_);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
}

// Migration 2 adds report times to a database of schema 1: its reports are
// kept, read as time 0, and the first age trim of their job drops them.
TEST_F(PostgresStoreTest, ReportsOfSchemaOneGetTimesAndAgeOut) {
  {
    std::unique_ptr<Store> s = Open();
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(s->CreateJob({"j", "", 1, 1}, Version("j", 1, "created")).ok());
    for (int step = 0; step < 10; ++step) {
      v1::ReportStepRequest r;
      r.set_job_id("j");
      r.set_step(step);
      ASSERT_TRUE(s->AppendStepReport(r).ok());
    }
  }
  ASSERT_TRUE(server_
                  ->RunSql(database_,
                           "ALTER TABLE step_reports DROP COLUMN time_ms, DROP COLUMN worker_id, "
                           "DROP COLUMN run_id, DROP COLUMN report_seq; "
                           "DROP TABLE job_leases; DROP TABLE rendezvous; "
                           "DELETE FROM schema_migrations WHERE version >= 2")
                  .ok());
  FakeClock clock;
  auto s = OpenPostgresStore(
      url_, {.report_window = 1000, .report_max_age = absl::Hours(1), .clock = &clock});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->RecentStepReports("j", 100, int64_t{1} << 30)->size(), 10u);
  // The job's next trim comes with its 62nd report (1000 / 16).
  for (int step = 10; step < 72; ++step) {
    v1::ReportStepRequest r;
    r.set_job_id("j");
    r.set_step(step);
    ASSERT_TRUE((*s)->AppendStepReport(r).ok());
  }
  auto left = (*s)->RecentStepReports("j", 100, int64_t{1} << 30);
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->size(), 62u);
  for (const v1::ReportStepRequest& r : *left) EXPECT_GE(r.step(), 10);
}

// Replicas share the reports table: a report resent to a second replica
// after the first stored it (and died before answering) is stored once.
TEST_F(PostgresStoreTest, AReportResentToAnotherReplicaIsStoredOnce) {
  std::unique_ptr<Store> a = Open();
  std::unique_ptr<Store> b = Open();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->CreateJob({"j", "", 1, 1}, Version("j", 1, "created")).ok());
  v1::ReportStepRequest r;
  r.set_job_id("j");
  r.set_worker_id("w0");
  r.set_run_id("run1");
  r.set_seq(5);
  ASSERT_TRUE(a->AppendStepReport(r).ok());
  ASSERT_TRUE(b->AppendStepReport(r).ok());
  r.set_run_id("run2");  // the worker restarted: its numbers start again
  ASSERT_TRUE(b->AppendStepReport(r).ok());
  r.set_worker_id("w1");
  ASSERT_TRUE(b->AppendStepReport(r).ok());
  r.clear_run_id();  // no run id: nothing to recognise it by
  ASSERT_TRUE(b->AppendStepReport(r).ok());
  ASSERT_TRUE(b->AppendStepReport(r).ok());
  auto stored = b->RecentStepReports("j", 100, int64_t{1} << 30);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 5u);
}

TEST_F(PostgresStoreTest, ServerDownIsUnavailableThenRecovers) {
  std::unique_ptr<Store> s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->CreateJob({"j", "", 1, 1}, Version("j", 1, "created")).ok());
  ASSERT_TRUE(server_->Restart().ok());
  // The pooled connections broke with the crash: the first use may report
  // UNAVAILABLE, never anything else, and a retry reconnects.
  absl::StatusOr<v1::VersionedPlan> p = s->GetPlan("j", 1);
  for (int i = 0; i < 3 && !p.ok(); ++i) {
    EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable) << p.status();
    p = s->GetPlan("j", 1);
  }
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->reason(), "created");
  EXPECT_TRUE(s->AppendPlan(Version("j", 2, "after")).ok());
}

TEST(PostgresStoreOpen, UnreachableIsUnavailableAndBadUrlIsPrecondition) {
  EXPECT_EQ(OpenPostgresStore("postgresql:///x?host=/nonexistent-pipeplan-dir").status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(OpenPostgresStore("postgresql://[bad").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RedactedStoreUrl("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
  EXPECT_EQ(RedactedStoreUrl("postgres://u@h/db"), "postgres://u@h/db");
  EXPECT_TRUE(IsPostgresUrl("postgresql:///db"));
  EXPECT_FALSE(IsPostgresUrl("/var/lib/pipeplan"));
}

}  // namespace
}  // namespace pipeplan::server
