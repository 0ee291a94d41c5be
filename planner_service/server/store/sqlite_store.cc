// SQLite-backed Store: one file `pipeplan.db` in the data directory, WAL
// journal (readers never block the writer; a crash loses at most the
// transaction in flight), one transaction per mutation.
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/server/store/store.h"

namespace pipeplan::server {
namespace {

// An SQLite result code as the Store contract's status: a full disk is
// RESOURCE_EXHAUSTED, an I/O error, a read-only file or a busy database
// UNAVAILABLE (the write may succeed later), a broken constraint
// ALREADY_EXISTS (callers say which record), a corrupt file DATA_LOSS.
absl::Status SqliteStatus(int extended_code, std::string message) {
  switch (extended_code & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(std::move(message));
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PROTOCOL:
      return absl::UnavailableError(std::move(message));
    case SQLITE_CONSTRAINT:
      return absl::AlreadyExistsError(std::move(message));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(std::move(message));
    default:
      return absl::InternalError(std::move(message));
  }
}

}  // namespace

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("empty data directory");
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create directory ", prefix, ": ", std::strerror(errno)));
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  }
  return absl::OkStatus();
}

namespace {

// Version 2 added job_training (the training spec and the job's state), 3
// the time of each step report (for retention by age). Older directories are
// migrated at open: job_training is created empty (every existing job reads
// as RUNNING without a training spec) and existing reports get time 0 (the
// first age trim removes them).
constexpr int kSchemaVersion = 3;

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  create_time_ms INTEGER NOT NULL,
  current_version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS plans (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  version INTEGER NOT NULL,
  record BLOB NOT NULL,
  PRIMARY KEY (job_id, version));
CREATE TABLE IF NOT EXISTS workers (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  worker_id TEXT NOT NULL,
  info BLOB NOT NULL,
  rank INTEGER NOT NULL,
  state INTEGER NOT NULL,
  last_heartbeat_ms INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  PRIMARY KEY (job_id, worker_id));
CREATE TABLE IF NOT EXISTS step_reports (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  report BLOB NOT NULL,
  time_ms INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS step_reports_by_job ON step_reports(job_id, seq);
CREATE TABLE IF NOT EXISTS job_training (
  job_id TEXT PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
  spec BLOB NOT NULL,
  state INTEGER NOT NULL,
  failure TEXT NOT NULL);
)sql";

// A prepared statement; reset on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  absl::Status prepared() const {
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return SqliteStatus(sqlite3_extended_errcode(db_),
                        absl::StrCat("sqlite prepare: ", sqlite3_errmsg(db_)));
  }
  Stmt& Bind(int i, std::string_view text) {
    sqlite3_bind_text(s_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindBlob(int i, const std::string& blob) {
    sqlite3_bind_blob(s_, i, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  // true: a row is available; false: done.
  absl::StatusOr<bool> Step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteStatus(sqlite3_extended_errcode(db_),
                        absl::StrCat("sqlite: ", sqlite3_errmsg(db_)));
  }
  absl::Status Run() {
    PIPEPLAN_RETURN_IF_ERROR(prepared());
    auto r = Step();
    return r.ok() ? absl::OkStatus() : r.status();
  }
  // REQUIRES: prepared(). Calls `row()` (absl::StatusOr<bool>: true to go
  // on) on each row in turn; stops when the rows run out, when `row` answers
  // false, or at the first error (the statement's or the one `row` returns).
  template <typename F>
  absl::Status ForEachRow(F row) {
    while (true) {
      PIPEPLAN_ASSIGN_OR_RETURN(bool more, Step());
      if (!more) return absl::OkStatus();
      PIPEPLAN_ASSIGN_OR_RETURN(bool go_on, row());
      if (!go_on) return absl::OkStatus();
    }
  }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(s_, col);
    return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s_, col))
             : std::string();
  }
  std::string Blob(int col) const {
    const void* b = sqlite3_column_blob(s_, col);
    return b ? std::string(static_cast<const char*>(b), sqlite3_column_bytes(s_, col))
             : std::string();
  }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  int64_t Size(int col) const { return sqlite3_column_bytes(s_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

class SqliteStore : public Store {
 public:
  SqliteStore(sqlite3* db, SqliteStoreOptions options) : db_(db), options_(options) {}
  ~SqliteStore() override { sqlite3_close(db_); }

  absl::Status Init() {
    absl::MutexLock l(&mu_);
    // Before anything else: this reads the header, so a file that is not a
    // database fails here, with a message that says so.
    PIPEPLAN_RETURN_IF_ERROR(CheckIsOurs());
    // Takes effect only on a new file (before its first table): pages freed
    // by deleted jobs can then be handed back (incremental_vacuum).
    PIPEPLAN_RETURN_IF_ERROR(Exec("PRAGMA auto_vacuum=INCREMENTAL"));
    PIPEPLAN_RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL"));
    PIPEPLAN_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
    PIPEPLAN_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=ON"));
    sqlite3_busy_timeout(db_, 5000);
    PIPEPLAN_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    absl::Status s = CreateSchema();
    PIPEPLAN_RETURN_IF_ERROR(Exec(s.ok() ? "COMMIT" : "ROLLBACK"));
    return s;
  }

  absl::Status CreateJob(const JobRecord& job, const v1::VersionedPlan& first) override {
    absl::MutexLock l(&mu_);
    return Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      Stmt ins(db_, "INSERT INTO jobs(id, name, create_time_ms, current_version) VALUES(?,?,?,?)");
      PIPEPLAN_RETURN_IF_ERROR(ins.prepared());
      ins.Bind(1, job.id)
          .Bind(2, job.name)
          .Bind(3, job.create_time_unix_ms)
          .Bind(4, first.version());
      absl::Status s = ins.Run();
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("job ", job.id, ": ", s.message()));
      PIPEPLAN_RETURN_IF_ERROR(
          PutJobTraining(job.id, job.training, job.state, job.failure_message));
      return InsertPlan(first);
    });
  }

  absl::Status SetJobState(const std::string& job_id, v1::JobState state,
                           const std::string& failure_message) override {
    absl::MutexLock l(&mu_);
    return Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      PIPEPLAN_RETURN_IF_ERROR(CurrentVersion(job_id).status());
      Stmt q(db_, "SELECT spec FROM job_training WHERE job_id=?");
      PIPEPLAN_RETURN_IF_ERROR(q.prepared());
      q.Bind(1, job_id);
      PIPEPLAN_ASSIGN_OR_RETURN(bool row, q.Step());
      v1::TrainingSpec spec;
      if (row && !spec.ParseFromString(q.Blob(0))) {
        return absl::DataLossError(absl::StrCat("job ", job_id, " training spec is corrupt"));
      }
      return PutJobTraining(job_id, spec, state, failure_message);
    });
  }

  absl::Status AppendPlan(const v1::VersionedPlan& plan) override {
    absl::MutexLock l(&mu_);
    return Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      PIPEPLAN_ASSIGN_OR_RETURN(int64_t current, CurrentVersion(plan.job_id()));
      if (plan.version() != current + 1) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job ", plan.job_id(), ": version ", plan.version(), " does not follow ", current));
      }
      PIPEPLAN_RETURN_IF_ERROR(InsertPlan(plan));
      Stmt up(db_, "UPDATE jobs SET current_version=? WHERE id=?");
      up.Bind(1, plan.version()).Bind(2, plan.job_id());
      return up.Run();
    });
  }

  absl::Status DeleteJob(const std::string& job_id) override {
    absl::MutexLock l(&mu_);
    PIPEPLAN_RETURN_IF_ERROR(Transaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      PIPEPLAN_RETURN_IF_ERROR(CurrentVersion(job_id).status());
      Stmt del(db_, "DELETE FROM jobs WHERE id=?");
      del.Bind(1, job_id);
      return del.Run();
    }));
    appends_since_trim_.erase(job_id);
    // The job's pages go back to the file system (a no-op for files created
    // before auto_vacuum was on). Best effort: the deletion is committed.
    (void)Exec("PRAGMA incremental_vacuum");
    return absl::OkStatus();
  }

  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) override {
    absl::MutexLock l(&mu_);
    Stmt q(db_, "SELECT record FROM plans WHERE job_id=? AND version=?");
    PIPEPLAN_RETURN_IF_ERROR(q.prepared());
    q.Bind(1, job_id).Bind(2, version);
    PIPEPLAN_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) {
      return absl::NotFoundError(absl::StrCat("job ", job_id, " has no plan version ", version));
    }
    v1::VersionedPlan plan;
    if (!plan.ParseFromString(q.Blob(0))) {
      return absl::DataLossError(
          absl::StrCat("job ", job_id, " plan version ", version, " is corrupt in the store"));
    }
    return plan;
  }

  absl::Status PutWorker(const WorkerRecord& w) override {
    absl::MutexLock l(&mu_);
    Stmt q(db_,
           "INSERT OR REPLACE INTO workers(job_id, worker_id, info, rank, state, "
           "last_heartbeat_ms, last_step) VALUES(?,?,?,?,?,?,?)");
    PIPEPLAN_RETURN_IF_ERROR(q.prepared());
    q.Bind(1, w.job_id)
        .Bind(2, w.info.worker_id())
        .BindBlob(3, w.info.SerializeAsString())
        .Bind(4, static_cast<int64_t>(w.rank))
        .Bind(5, static_cast<int64_t>(w.state))
        .Bind(6, w.last_heartbeat_unix_ms)
        .Bind(7, w.last_step);
    absl::Status s = q.Run();
    if (s.code() == absl::StatusCode::kAlreadyExists) {  // the job's foreign key
      return absl::NotFoundError(absl::StrCat("job ", w.job_id, ": ", s.message()));
    }
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("job ", w.job_id, ": ", s.message()));
    return s;
  }

  absl::Status AppendStepReport(const v1::ReportStepRequest& report) override {
    absl::MutexLock l(&mu_);
    Stmt q(db_, "INSERT INTO step_reports(job_id, report, time_ms) VALUES(?,?,?)");
    PIPEPLAN_RETURN_IF_ERROR(q.prepared());
    q.Bind(1, report.job_id())
        .BindBlob(2, report.SerializeAsString())
        .Bind(3, absl::ToUnixMillis(options_.clock->Now()));
    PIPEPLAN_RETURN_IF_ERROR(q.Run());
    // Trim the job's window now and then rather than on every insert; the
    // count is per job, so a busy job is trimmed however many others report.
    int& since = appends_since_trim_[report.job_id()];
    if (++since >= std::clamp(options_.report_window / 16, 1, 256)) {
      since = 0;
      PIPEPLAN_RETURN_IF_ERROR(TrimReports(report.job_id()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<v1::ReportStepRequest>> RecentStepReports(const std::string& job_id,
                                                                       int limit,
                                                                       int64_t max_bytes) override {
    absl::MutexLock l(&mu_);
    Stmt q(db_, "SELECT report FROM step_reports WHERE job_id=? ORDER BY seq DESC LIMIT ?");
    PIPEPLAN_RETURN_IF_ERROR(q.prepared());
    q.Bind(1, job_id).Bind(2, int64_t{std::min(limit, options_.report_window)});
    std::vector<v1::ReportStepRequest> out;
    int64_t bytes = 0;
    PIPEPLAN_RETURN_IF_ERROR(q.ForEachRow([&]() -> absl::StatusOr<bool> {
      bytes += q.Size(0);
      if (!out.empty() && bytes > max_bytes) return false;
      v1::ReportStepRequest r;
      if (r.ParseFromString(q.Blob(0))) out.push_back(std::move(r));
      return true;
    }));
    return out;
  }

  absl::StatusOr<std::vector<StoredJob>> Load() override {
    absl::MutexLock l(&mu_);
    std::vector<StoredJob> out;
    Stmt jobs(db_,
              "SELECT j.id, j.name, j.create_time_ms, j.current_version, p.record, t.spec, "
              "t.state, t.failure FROM jobs j "
              "JOIN plans p ON p.job_id = j.id AND p.version = j.current_version "
              "LEFT JOIN job_training t ON t.job_id = j.id ORDER BY j.id");
    PIPEPLAN_RETURN_IF_ERROR(jobs.prepared());
    PIPEPLAN_RETURN_IF_ERROR(jobs.ForEachRow([&]() -> absl::StatusOr<bool> {
      StoredJob sj;
      sj.job.id = jobs.Text(0);
      sj.job.name = jobs.Text(1);
      sj.job.create_time_unix_ms = jobs.Int(2);
      sj.job.current_version = jobs.Int(3);
      if (!sj.current.ParseFromString(jobs.Blob(4))) {
        return absl::DataLossError(absl::StrCat("job ", sj.job.id, " current plan is corrupt"));
      }
      if (!jobs.IsNull(5)) {
        if (!sj.job.training.ParseFromString(jobs.Blob(5))) {
          return absl::DataLossError(absl::StrCat("job ", sj.job.id, " training spec is corrupt"));
        }
        sj.job.state = static_cast<v1::JobState>(jobs.Int(6));
        sj.job.failure_message = jobs.Text(7);
      }
      out.push_back(std::move(sj));
      return true;
    }));
    Stmt workers(db_,
                 "SELECT job_id, info, rank, state, last_heartbeat_ms, last_step FROM workers "
                 "ORDER BY job_id, worker_id");
    PIPEPLAN_RETURN_IF_ERROR(workers.prepared());
    PIPEPLAN_RETURN_IF_ERROR(workers.ForEachRow([&]() -> absl::StatusOr<bool> {
      WorkerRecord w;
      w.job_id = workers.Text(0);
      if (!w.info.ParseFromString(workers.Blob(1))) return true;
      w.rank = static_cast<int>(workers.Int(2));
      w.state = static_cast<v1::WorkerState>(workers.Int(3));
      w.last_heartbeat_unix_ms = workers.Int(4);
      w.last_step = workers.Int(5);
      for (StoredJob& sj : out) {
        if (sj.job.id == w.job_id) {
          sj.workers.push_back(std::move(w));
          break;
        }
      }
      return true;
    }));
    return out;
  }

 private:
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : sqlite3_errmsg(db_);
      sqlite3_free(err);
      return SqliteStatus(sqlite3_extended_errcode(db_),
                          absl::StrCat("sqlite: ", msg, " (", sql, ")"));
    }
    return absl::OkStatus();
  }

  // Runs `body` between BEGIN and COMMIT (ROLLBACK when it fails). Clang
  // analyses a lambda on its own, so bodies that touch the database say
  // ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) themselves.
  template <typename F>
  absl::Status Transaction(F body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    PIPEPLAN_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    absl::Status s = body();
    if (!s.ok()) {
      (void)Exec("ROLLBACK");
      return s;
    }
    absl::Status c = Exec("COMMIT");
    if (!c.ok()) (void)Exec("ROLLBACK");
    return c;
  }

  // FAILED_PRECONDITION for a file that is not an SQLite database, or is
  // another program's: tables, but no pipeplan meta table. A new (empty)
  // database passes.
  absl::Status CheckIsOurs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Stmt q(db_,
           "SELECT count(*), count(CASE WHEN name='meta' THEN 1 END) FROM sqlite_master "
           "WHERE type='table'");
    if (!q.prepared().ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "not an SQLite database (", sqlite3_errmsg(db_), "); move it away or restore a backup"));
    }
    absl::StatusOr<bool> row = q.Step();
    if (!row.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("not a readable SQLite database (",
                                                        row.status().message(),
                                                        "); move it away or restore a backup"));
    }
    if (*row && q.Int(0) > 0 && q.Int(1) == 0) {
      return absl::FailedPreconditionError(
          "an SQLite database of another program (it has tables but no pipeplan meta table); "
          "point --data-dir elsewhere");
    }
    return absl::OkStatus();
  }

  // Drops the job's reports past the newest report_window, and those older
  // than report_max_age.
  absl::Status TrimReports(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t oldest_ms =
        options_.report_max_age > absl::ZeroDuration()
            ? absl::ToUnixMillis(options_.clock->Now() - options_.report_max_age)
            : std::numeric_limits<int64_t>::min();
    Stmt trim(db_,
              "DELETE FROM step_reports WHERE job_id=?1 AND (time_ms < ?3 OR seq <= "
              "(SELECT seq FROM step_reports WHERE job_id=?1 ORDER BY seq DESC LIMIT 1 "
              "OFFSET ?2))");
    PIPEPLAN_RETURN_IF_ERROR(trim.prepared());
    trim.Bind(1, job_id).Bind(2, int64_t{options_.report_window}).Bind(3, oldest_ms);
    return trim.Run();
  }

  absl::Status CreateSchema() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    PIPEPLAN_RETURN_IF_ERROR(Exec(kSchema));
    PIPEPLAN_RETURN_IF_ERROR(AddReportTimes());
    Stmt q(db_, "SELECT value FROM meta WHERE key='schema_version'");
    PIPEPLAN_RETURN_IF_ERROR(q.prepared());
    PIPEPLAN_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) {
      Stmt ins(db_, "INSERT INTO meta(key, value) VALUES('schema_version', ?)");
      ins.Bind(1, std::to_string(kSchemaVersion));
      return ins.Run();
    }
    const std::string v = q.Text(0);
    if (v == "1" || v == "2") {  // migrated above
      Stmt up(db_, "UPDATE meta SET value=? WHERE key='schema_version'");
      up.Bind(1, std::to_string(kSchemaVersion));
      return up.Run();
    }
    if (v != std::to_string(kSchemaVersion)) {
      return absl::FailedPreconditionError(absl::StrCat("the data directory's schema version is ",
                                                        v, "; this planner reads version ",
                                                        kSchemaVersion));
    }
    return absl::OkStatus();
  }

  // Schema 3: step_reports.time_ms, added to a table of an older schema.
  absl::Status AddReportTimes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Stmt q(db_, "SELECT count(*) FROM pragma_table_info('step_reports') WHERE name='time_ms'");
    PIPEPLAN_RETURN_IF_ERROR(q.prepared());
    PIPEPLAN_ASSIGN_OR_RETURN(bool row, q.Step());
    if (row && q.Int(0) > 0) return absl::OkStatus();
    return Exec("ALTER TABLE step_reports ADD COLUMN time_ms INTEGER NOT NULL DEFAULT 0");
  }

  absl::StatusOr<int64_t> CurrentVersion(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Stmt q(db_, "SELECT current_version FROM jobs WHERE id=?");
    PIPEPLAN_RETURN_IF_ERROR(q.prepared());
    q.Bind(1, job_id);
    PIPEPLAN_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
    return q.Int(0);
  }

  absl::Status PutJobTraining(const std::string& job_id, const v1::TrainingSpec& spec,
                              v1::JobState state, const std::string& failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Stmt q(db_,
           "INSERT OR REPLACE INTO job_training(job_id, spec, state, failure) VALUES(?,?,?,?)");
    PIPEPLAN_RETURN_IF_ERROR(q.prepared());
    q.Bind(1, job_id)
        .BindBlob(2, spec.SerializeAsString())
        .Bind(3, static_cast<int64_t>(state))
        .Bind(4, failure);
    return q.Run();
  }

  absl::Status InsertPlan(const v1::VersionedPlan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Stmt ins(db_, "INSERT INTO plans(job_id, version, record) VALUES(?,?,?)");
    PIPEPLAN_RETURN_IF_ERROR(ins.prepared());
    ins.Bind(1, plan.job_id()).Bind(2, plan.version()).BindBlob(3, plan.SerializeAsString());
    absl::Status s = ins.Run();
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("job ", plan.job_id(), " plan version ",
                                                 plan.version(), ": ", s.message()));
    }
    return s;
  }

  absl::Mutex mu_;
  // One connection, used by one statement at a time.
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  const SqliteStoreOptions options_;
  // Reports appended per job since its last trim.
  absl::flat_hash_map<std::string, int> appends_since_trim_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& dir,
                                                       SqliteStoreOptions options) {
  PIPEPLAN_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = dir + "/pipeplan.db";
  // SQLite treats a zero-byte file as a new empty database: the planner
  // would silently start with no jobs on a truncated or half-copied file.
  if (struct stat st; stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path,
                     " is empty (0 bytes), not a pipeplan database; restore it from a backup, or "
                     "delete it to start with no state"));
  }
  if (options.clock == nullptr) options.clock = RealClock();
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::FailedPreconditionError(absl::StrCat("cannot open ", path, ": ", msg));
  }
  auto store = std::make_unique<SqliteStore>(db, options);
  absl::Status s = store->Init();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace pipeplan::server
