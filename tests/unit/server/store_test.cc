#include "pipeplan/server/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "support/postgres_server.h"
#include "test_util.h"

namespace pipeplan::server {
namespace {

using ::pipeplan::testing::PostgresServer;
using testing::TempDir;

v1::VersionedPlan Version(const std::string& job, int64_t v) {
  v1::VersionedPlan p;
  p.set_job_id(job);
  p.set_version(v);
  p.mutable_plan()->set_graph_name("g" + std::to_string(v));
  p.mutable_plan()->set_microbatches(static_cast<int>(v));
  p.mutable_request()->mutable_options()->set_num_ranks(static_cast<int>(v));
  p.set_reason(v == 1 ? "created" : "replan");
  return p;
}

WorkerRecord Worker(const std::string& job, const std::string& id) {
  WorkerRecord w;
  w.job_id = job;
  w.info.set_worker_id(id);
  w.info.set_device_id("gpu0");
  w.info.set_host("h");
  w.rank = 0;
  w.last_heartbeat_unix_ms = 1234;
  return w;
}

enum class Backend { kSqlite, kMemory, kPostgres };

// The same cases run against every backend: SQLite and memory here, and
// PostgreSQL in postgres_store_test (this file built with
// PIPEPLAN_STORE_TEST_POSTGRES), which starts a real server.
class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
#ifdef PIPEPLAN_STORE_TEST_POSTGRES
  static void SetUpTestSuite() {
    auto server = PostgresServer::Start();
    if (!server.ok()) {
      start_error_ = new absl::Status(server.status());
      return;
    }
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static inline PostgresServer* server_ = nullptr;
  static inline absl::Status* start_error_ = nullptr;
  static inline int databases_ = 0;
#endif

  void SetUp() override {
#ifdef PIPEPLAN_STORE_TEST_POSTGRES
    if (server_ == nullptr) {
      if (start_error_->code() == absl::StatusCode::kFailedPrecondition) {
        GTEST_SKIP() << *start_error_;
      }
      FAIL() << *start_error_;
    }
    auto url = server_->CreateDatabase(absl::StrCat("store_test_", ++databases_));
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
#endif
    Reopen();
  }
  void Reopen() {
    store_.reset();
    switch (GetParam()) {
      case Backend::kSqlite: {
        auto s = OpenSqliteStore(dir_.path() + "/data", {.report_window = 5});
        ASSERT_TRUE(s.ok()) << s.status();
        store_ = *std::move(s);
        break;
      }
      case Backend::kMemory:
        if (!store_) store_ = NewMemoryStore(5);
        break;
      case Backend::kPostgres: {
        auto s = OpenPostgresStore(url_, {.report_window = 5, .connections = 2});
        ASSERT_TRUE(s.ok()) << s.status();
        store_ = *std::move(s);
        break;
      }
    }
  }
  bool persistent() const { return GetParam() != Backend::kMemory; }
  TempDir dir_;
  std::string url_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, JobsAndVersions) {
  ASSERT_TRUE(store_->CreateJob({"j1", "one", 100, 1}, Version("j1", 1)).ok());
  EXPECT_EQ(store_->CreateJob({"j1", "dup", 100, 1}, Version("j1", 1)).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(store_->AppendPlan(Version("j1", 2)).ok());
  EXPECT_EQ(store_->AppendPlan(Version("j1", 4)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->AppendPlan(Version("nope", 1)).code(), absl::StatusCode::kNotFound);

  auto v1 = store_->GetPlan("j1", 1);
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->plan().graph_name(), "g1");
  EXPECT_EQ(v1->request().options().num_ranks(), 1);
  EXPECT_EQ(store_->GetPlan("j1", 3).status().code(), absl::StatusCode::kNotFound);

  auto loaded = store_->Load();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].job.name, "one");
  EXPECT_EQ((*loaded)[0].job.current_version, 2);
  EXPECT_EQ((*loaded)[0].current.version(), 2);
}

TEST_P(StoreTest, SurvivesReopen) {
  if (!persistent()) GTEST_SKIP() << "memory store";
  ASSERT_TRUE(store_->CreateJob({"j1", "one", 100, 1}, Version("j1", 1)).ok());
  ASSERT_TRUE(store_->AppendPlan(Version("j1", 2)).ok());
  ASSERT_TRUE(store_->PutWorker(Worker("j1", "w1")).ok());
  Reopen();
  auto loaded = store_->Load();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].current.plan().graph_name(), "g2");
  ASSERT_EQ((*loaded)[0].workers.size(), 1u);
  EXPECT_EQ((*loaded)[0].workers[0].info.worker_id(), "w1");
  EXPECT_EQ((*loaded)[0].workers[0].last_heartbeat_unix_ms, 1234);
  EXPECT_TRUE(store_->GetPlan("j1", 1).ok());
}

TEST_P(StoreTest, TrainingSpecAndJobState) {
  JobRecord job{"j1", "one", 100, 1};
  job.training.set_model_package("/pkg");
  job.training.set_optimizer("adamw");
  job.training.set_batch_size(32);
  ASSERT_TRUE(store_->CreateJob(job, Version("j1", 1)).ok());
  ASSERT_TRUE(store_->CreateJob({"j2", "plain", 100, 1}, Version("j2", 1)).ok());
  ASSERT_TRUE(store_->SetJobState("j1", v1::JOB_FAILED, "worker w0: bad data").ok());
  EXPECT_EQ(store_->SetJobState("nope", v1::JOB_FAILED, "").code(), absl::StatusCode::kNotFound);
  if (persistent()) Reopen();
  auto loaded = store_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  const JobRecord& j1 = (*loaded)[0].job;
  EXPECT_EQ(j1.training.model_package(), "/pkg");
  EXPECT_EQ(j1.training.batch_size(), 32);
  EXPECT_EQ(j1.state, v1::JOB_FAILED);
  EXPECT_EQ(j1.failure_message, "worker w0: bad data");
  EXPECT_EQ((*loaded)[1].job.state, v1::JOB_RUNNING);
  EXPECT_FALSE((*loaded)[1].job.training.has_weight_decay());
  EXPECT_TRUE((*loaded)[1].job.training.model_package().empty());
}

TEST_P(StoreTest, WorkersAndReportWindow) {
  ASSERT_TRUE(store_->CreateJob({"j1", "", 1, 1}, Version("j1", 1)).ok());
  EXPECT_EQ(store_->PutWorker(Worker("nope", "w")).code(), absl::StatusCode::kNotFound);
  WorkerRecord w = Worker("j1", "w1");
  ASSERT_TRUE(store_->PutWorker(w).ok());
  w.state = v1::WORKER_LOST;
  ASSERT_TRUE(store_->PutWorker(w).ok());  // replaces
  auto loaded = store_->Load();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ((*loaded)[0].workers.size(), 1u);
  EXPECT_EQ((*loaded)[0].workers[0].state, v1::WORKER_LOST);

  for (int step = 0; step < 600; ++step) {
    v1::ReportStepRequest r;
    r.set_job_id("j1");
    r.set_worker_id("w1");
    r.set_step(step);
    ASSERT_TRUE(store_->AppendStepReport(r).ok());
  }
  auto recent = store_->RecentStepReports("j1", 3);
  ASSERT_TRUE(recent.ok());
  ASSERT_EQ(recent->size(), 3u);
  EXPECT_EQ((*recent)[0].step(), 599);
  EXPECT_EQ((*recent)[2].step(), 597);
  auto all = store_->RecentStepReports("j1", 1000);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 5u);  // the window
}

TEST_P(StoreTest, DeleteCascades) {
  ASSERT_TRUE(store_->CreateJob({"j1", "", 1, 1}, Version("j1", 1)).ok());
  ASSERT_TRUE(store_->PutWorker(Worker("j1", "w1")).ok());
  ASSERT_TRUE(store_->DeleteJob("j1").ok());
  EXPECT_EQ(store_->DeleteJob("j1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetPlan("j1", 1).status().code(), absl::StatusCode::kNotFound);
  auto loaded = store_->Load();
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(loaded->empty());
  // The id can be reused.
  EXPECT_TRUE(store_->CreateJob({"j1", "", 1, 1}, Version("j1", 1)).ok());
}

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  switch (info.param) {
    case Backend::kSqlite:
      return "Sqlite";
    case Backend::kMemory:
      return "Memory";
    case Backend::kPostgres:
      return "Postgres";
  }
  return "?";
}

#ifdef PIPEPLAN_STORE_TEST_POSTGRES
INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values(Backend::kPostgres), BackendName);
#else
INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values(Backend::kSqlite, Backend::kMemory),
                         BackendName);
#endif

#ifndef PIPEPLAN_STORE_TEST_POSTGRES
TEST(SqliteStore, UsesWalAndRejectsNewerSchema) {
  TempDir dir;
  {
    auto s = OpenSqliteStore(dir.path());
    ASSERT_TRUE(s.ok()) << s.status();
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/pipeplan.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value='99' WHERE key='schema_version'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = OpenSqliteStore(dir.path());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("schema version is 99"), std::string::npos);
}

// A data directory written by a version-1 planner (no job_training table)
// opens: the table is added and its jobs read as RUNNING planning-only jobs.
TEST(SqliteStore, MigratesSchemaVersion1) {
  TempDir dir;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/pipeplan.db").c_str(), &db), SQLITE_OK);
  const std::string plan = Version("old", 1).SerializeAsString();
  const char* schema =
      "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "INSERT INTO meta VALUES('schema_version', '1');"
      "CREATE TABLE jobs (id TEXT PRIMARY KEY, name TEXT NOT NULL, create_time_ms INTEGER NOT "
      "NULL, current_version INTEGER NOT NULL);"
      "CREATE TABLE plans (job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, version "
      "INTEGER NOT NULL, record BLOB NOT NULL, PRIMARY KEY (job_id, version));"
      "INSERT INTO jobs VALUES('old', 'legacy', 5, 1);";
  ASSERT_EQ(sqlite3_exec(db, schema, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO plans VALUES('old', 1, ?)", -1, &st, nullptr),
            SQLITE_OK);
  sqlite3_bind_blob(st, 1, plan.data(), static_cast<int>(plan.size()), SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
  sqlite3_finalize(st);
  sqlite3_close(db);

  auto s = OpenSqliteStore(dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  auto loaded = (*s)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].job.name, "legacy");
  EXPECT_EQ((*loaded)[0].job.state, v1::JOB_RUNNING);
  EXPECT_TRUE((*s)->SetJobState("old", v1::JOB_COMPLETED, "").ok());
  s->reset();
  auto again = OpenSqliteStore(dir.path());  // now at version 2: opens as is
  ASSERT_TRUE(again.ok()) << again.status();
  auto reloaded = (*again)->Load();
  ASSERT_TRUE(reloaded.ok());
  EXPECT_EQ((*reloaded)[0].job.state, v1::JOB_COMPLETED);
}

TEST(SqliteStore, UnwritableDirectoryIsAnError) {
  auto s = OpenSqliteStore("/proc/pipeplan-cannot-exist/x");
  EXPECT_FALSE(s.ok());
}
#endif  // PIPEPLAN_STORE_TEST_POSTGRES

}  // namespace
}  // namespace pipeplan::server
