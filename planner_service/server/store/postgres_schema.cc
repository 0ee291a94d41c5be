#include "postgres_schema.h"

#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan::server {
namespace {

// Migration i (1-based) takes the schema from version i-1 to i. Append only:
// a released migration is never edited.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  create_time_ms BIGINT NOT NULL,
  current_version BIGINT NOT NULL,
  training_spec BYTEA NOT NULL,
  state INTEGER NOT NULL,
  failure TEXT NOT NULL);
CREATE TABLE plans (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  version BIGINT NOT NULL,
  record BYTEA NOT NULL,
  PRIMARY KEY (job_id, version));
CREATE TABLE workers (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  worker_id TEXT NOT NULL,
  info BYTEA NOT NULL,
  rank INTEGER NOT NULL,
  state INTEGER NOT NULL,
  last_heartbeat_ms BIGINT NOT NULL,
  last_step BIGINT NOT NULL,
  PRIMARY KEY (job_id, worker_id));
CREATE TABLE step_reports (
  seq BIGSERIAL PRIMARY KEY,
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  report BYTEA NOT NULL);
CREATE INDEX step_reports_by_job ON step_reports(job_id, seq);
)sql",
    // 2: the time of each step report, for retention by age. Reports stored
    // before it read as time 0: the first age trim of their job drops them.
    R"sql(
ALTER TABLE step_reports ADD COLUMN time_ms BIGINT NOT NULL DEFAULT 0;
)sql",
    // 3: job ownership between replicated planners. One row per owned job;
    // `token` grows at each change of owner and fences the owner's writes;
    // expiry is by the database's clock, so replicas' clocks do not matter.
    // And the rendezvous space, so a job's workers may use any replica.
    R"sql(
CREATE TABLE job_leases (
  job_id TEXT PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
  owner TEXT NOT NULL,
  address TEXT NOT NULL,
  token BIGINT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL);
CREATE INDEX job_leases_by_owner ON job_leases(owner);
CREATE TABLE rendezvous (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  value BYTEA NOT NULL,
  version BIGINT NOT NULL,
  PRIMARY KEY (job_id, key));
)sql",
    // 4: a report is stored once per (worker, run, report number), by the
    // database. Each replica's registry skips a report it knows is stored,
    // but a worker whose replica died after storing a report resends it to
    // another replica that may not have seen it yet. Reports stored before
    // have run_id '' and are not constrained.
    R"sql(
ALTER TABLE step_reports ADD COLUMN worker_id TEXT NOT NULL DEFAULT '';
ALTER TABLE step_reports ADD COLUMN run_id TEXT NOT NULL DEFAULT '';
ALTER TABLE step_reports ADD COLUMN report_seq BIGINT NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX step_reports_once ON step_reports(job_id, worker_id, run_id, report_seq)
  WHERE run_id <> '';
)sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

// Any 64-bit constant shared by every pipeplan planner: serialises migrations.
constexpr char kMigrationLock[] = "SELECT pg_advisory_xact_lock(7606202611230015)";

}  // namespace

absl::StatusOr<int64_t> ParseInt(const PgResult& r, int row, int col) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(r.Text(row, col), &v)) {
    return absl::DataLossError(absl::StrCat("not an integer in the store: ", r.Text(row, col)));
  }
  return v;
}

absl::Status MigrateSchema(PgConnection& c) {
  PIPEPLAN_RETURN_IF_ERROR(c.Exec(kMigrationLock).status());
  PIPEPLAN_RETURN_IF_ERROR(c.Exec("CREATE TABLE IF NOT EXISTS schema_migrations ("
                                  "version INTEGER PRIMARY KEY, applied_ms BIGINT NOT NULL)")
                               .status());
  PIPEPLAN_ASSIGN_OR_RETURN(PgResult r,
                            c.Exec("SELECT COALESCE(MAX(version), 0) FROM schema_migrations"));
  PIPEPLAN_ASSIGN_OR_RETURN(int64_t applied, ParseInt(r, 0, 0));
  if (applied > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("the database's schema version is ", applied,
                                                      "; this planner reads versions up to ",
                                                      kSchemaVersion));
  }
  for (int64_t v = applied + 1; v <= kSchemaVersion; ++v) {
    PIPEPLAN_RETURN_IF_ERROR(c.Exec(kMigrations[v - 1]).status());
    PIPEPLAN_RETURN_IF_ERROR(c.Exec("INSERT INTO schema_migrations VALUES ($1, "
                                    "(EXTRACT(EPOCH FROM now()) * 1000)::BIGINT)",
                                    {absl::StrCat(v)})
                                 .status());
  }
  return absl::OkStatus();
}

}  // namespace pipeplan::server
