#include "pipeplan/server/store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "support/postgres_server.h"
#include "test_util.h"

namespace pipeplan::server {
namespace {

using ::pipeplan::testing::PostgresServer;
using testing::TempDir;

constexpr int64_t kAnyBytes = int64_t{1} << 40;

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

v1::ReportStepRequest Report(const std::string& job, int64_t step, size_t pad = 0) {
  v1::ReportStepRequest r;
  r.set_job_id(job);
  r.set_worker_id("w1");
  r.set_step(step);
  if (pad > 0) r.add_timings()->set_action(std::string(pad, 'F'));
  return r;
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
  // Reports kept per job: the newest `window`, none older than `max_age`
  // by clock_ (the memory store keeps no times).
  void Reopen(int window = 5, absl::Duration max_age = absl::ZeroDuration()) {
    store_.reset();
    switch (GetParam()) {
      case Backend::kSqlite: {
        auto s =
            OpenSqliteStore(dir_.path() + "/data",
                            {.report_window = window, .report_max_age = max_age, .clock = &clock_});
        ASSERT_TRUE(s.ok()) << s.status();
        store_ = *std::move(s);
        break;
      }
      case Backend::kMemory:
        if (!store_) store_ = NewMemoryStore(window);
        break;
      case Backend::kPostgres: {
        auto s = OpenPostgresStore(url_, {.report_window = window,
                                          .report_max_age = max_age,
                                          .clock = &clock_,
                                          .connections = 2});
        ASSERT_TRUE(s.ok()) << s.status();
        store_ = *std::move(s);
        break;
      }
    }
  }
  bool persistent() const { return GetParam() != Backend::kMemory; }
  FakeClock clock_;
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

// A version's prediction (made before it ran) is part of the version: every
// backend keeps it, also across a reopen, for the out-of-sample check.
TEST_P(StoreTest, KeepsTheVersionsPrediction) {
  ASSERT_TRUE(store_->CreateJob({"j1", "one", 100, 1}, Version("j1", 1)).ok());
  v1::VersionedPlan next = Version("j1", 2);
  v1::VersionPrediction* p = next.mutable_prediction();
  p->set_step_seconds(0.25);
  p->set_p90_step_seconds(0.3);
  p->set_calibrated_on_version(1);
  p->set_previous_measured_step_seconds(0.4);
  p->set_trigger("calibration");
  ASSERT_TRUE(store_->AppendPlan(next).ok());
  if (persistent()) Reopen();
  auto got = store_->GetPlan("j1", 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->prediction().step_seconds(), 0.25);
  EXPECT_EQ(got->prediction().p90_step_seconds(), 0.3);
  EXPECT_EQ(got->prediction().calibrated_on_version(), 1);
  EXPECT_EQ(got->prediction().previous_measured_step_seconds(), 0.4);
  EXPECT_EQ(got->prediction().trigger(), "calibration");
  auto loaded = store_->Load();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].current.prediction().step_seconds(), 0.25);
  EXPECT_FALSE(store_->GetPlan("j1", 1)->has_prediction());
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
  auto recent = store_->RecentStepReports("j1", 3, kAnyBytes);
  ASSERT_TRUE(recent.ok());
  ASSERT_EQ(recent->size(), 3u);
  EXPECT_EQ((*recent)[0].step(), 599);
  EXPECT_EQ((*recent)[2].step(), 597);
  auto all = store_->RecentStepReports("j1", 1000, kAnyBytes);
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

TEST_P(StoreTest, ReadsAreBoundedInBytes) {
  ASSERT_TRUE(store_->CreateJob({"j1", "", 1, 1}, Version("j1", 1)).ok());
  for (int step = 0; step < 5; ++step)
    ASSERT_TRUE(store_->AppendStepReport(Report("j1", step, 1000)).ok());
  const int64_t one = static_cast<int64_t>(Report("j1", 4, 1000).ByteSizeLong());
  auto two = store_->RecentStepReports("j1", 5, 2 * one + 1);
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].step(), 4);
  // The newest report comes back even when it alone is over the bound.
  auto first = store_->RecentStepReports("j1", 5, 1);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ((*first)[0].step(), 4);
}

// Not the memory store's: it keeps no report times.
TEST_P(StoreTest, ReportsOlderThanTheRetentionAgeAreDropped) {
  if (!persistent()) GTEST_SKIP() << "memory store";
  Reopen(1000, absl::Hours(1));
  ASSERT_TRUE(store_->CreateJob({"j", "", 1, 1}, Version("j", 1)).ok());
  for (int step = 0; step < 100; ++step)
    ASSERT_TRUE(store_->AppendStepReport(Report("j", step)).ok());
  clock_.Advance(absl::Minutes(61));
  // The next trim of the job (every 1000 / 16 = 62 reports) drops the old ones.
  for (int step = 100; step < 200; ++step)
    ASSERT_TRUE(store_->AppendStepReport(Report("j", step)).ok());
  auto left = store_->RecentStepReports("j", 1000, kAnyBytes);
  ASSERT_TRUE(left.ok());
  ASSERT_FALSE(left->empty());
  EXPECT_EQ(left->size(), 100u);  // the new ones
  for (const v1::ReportStepRequest& r : *left) EXPECT_GE(r.step(), 100);
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

// Reads from the database file directly (a second connection, WAL-safe).
int64_t QueryInt(const std::string& dir, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open((dir + "/pipeplan.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
  int64_t v = -1;
  if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

// The trim counter is per job: a busy job stays at its window however often
// other jobs report in between (it used to be one counter for all jobs, so
// the job whose report hit the 256th append was the only one trimmed).
TEST(SqliteStore, EveryJobIsTrimmedToItsWindow) {
  TempDir dir;
  auto s = OpenSqliteStore(dir.path(), {.report_window = 64});  // trims every 4 of a job
  ASSERT_TRUE(s.ok()) << s.status();
  Store& store = **s;
  for (const char* job : {"busy", "quiet"}) {
    ASSERT_TRUE(store.CreateJob({job, "", 1, 1}, Version(job, 1)).ok());
  }
  for (int round = 0; round < 600; ++round) {
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(store.AppendStepReport(Report("busy", 3 * round + i)).ok());
    ASSERT_TRUE(store.AppendStepReport(Report("quiet", round)).ok());
  }
  for (const char* job : {"busy", "quiet"}) {
    const int64_t rows = QueryInt(
        dir.path(), absl::StrCat("SELECT count(*) FROM step_reports WHERE job_id='", job, "'"));
    EXPECT_GE(rows, 64) << job;
    EXPECT_LE(rows, 64 + 4) << job;
  }
}

TEST(SqliteStore, DeletedJobsGiveTheirPagesBack) {
  TempDir dir;
  auto s = OpenSqliteStore(dir.path(), {.report_window = 10'000});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(QueryInt(dir.path(), "PRAGMA auto_vacuum"), 2);  // incremental
  ASSERT_TRUE((*s)->CreateJob({"j", "", 1, 1}, Version("j", 1)).ok());
  for (int step = 0; step < 2000; ++step) {
    ASSERT_TRUE((*s)->AppendStepReport(Report("j", step, 2000)).ok());
  }
  const int64_t full = QueryInt(dir.path(), "PRAGMA page_count");
  ASSERT_TRUE((*s)->DeleteJob("j").ok());
  const int64_t after = QueryInt(dir.path(), "PRAGMA page_count");
  EXPECT_GT(full, 1000);
  EXPECT_LT(after, full / 10) << full << " -> " << after;
}

TEST(SqliteStore, RefusesAZeroByteDatabase) {
  TempDir dir;
  { std::ofstream(dir.path() + "/pipeplan.db"); }
  auto s = OpenSqliteStore(dir.path());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("pipeplan.db is empty (0 bytes)"), std::string::npos)
      << s.status();
}

TEST(SqliteStore, RefusesAFileThatIsNotADatabase) {
  TempDir dir;
  {
    std::ofstream out(dir.path() + "/pipeplan.db");
    for (int i = 0; i < 200; ++i) out << "this is a text file, not a database\n";
  }
  auto s = OpenSqliteStore(dir.path());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("not an SQLite database"), std::string::npos) << s.status();
}

TEST(SqliteStore, RefusesAnotherProgramsDatabase) {
  TempDir dir;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/pipeplan.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db, "CREATE TABLE photos (id INTEGER, data BLOB)", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto s = OpenSqliteStore(dir.path());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("another program"), std::string::npos) << s.status();
  // Nothing of ours was added to it.
  EXPECT_EQ(QueryInt(dir.path(), "SELECT count(*) FROM sqlite_master WHERE name='jobs'"), 0);
}

// A version-2 directory (reports without times) opens and keeps its reports.
TEST(SqliteStore, MigratesSchemaVersion2) {
  TempDir dir;
  {
    auto s = OpenSqliteStore(dir.path());
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->CreateJob({"j", "", 1, 1}, Version("j", 1)).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir.path() + "/pipeplan.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE step_reports; CREATE TABLE step_reports (seq INTEGER PRIMARY "
                         "KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE "
                         "CASCADE, report BLOB NOT NULL); UPDATE meta SET value='2' WHERE "
                         "key='schema_version'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = OpenSqliteStore(dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->AppendStepReport(Report("j", 1)).ok());
  EXPECT_EQ((*s)->RecentStepReports("j", 10, kAnyBytes)->size(), 1u);
  EXPECT_EQ(QueryInt(dir.path(), "SELECT value FROM meta WHERE key='schema_version'"), 3);
}

TEST(SqliteStore, UnwritableDirectoryIsAnError) {
  auto s = OpenSqliteStore("/proc/pipeplan-cannot-exist/x");
  EXPECT_FALSE(s.ok());
}
#endif  // PIPEPLAN_STORE_TEST_POSTGRES

}  // namespace
}  // namespace pipeplan::server
