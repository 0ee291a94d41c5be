// PostgreSQL-backed Store (`--store postgres://...`): the same contract as the
// SQLite store, for planners that share one database (issue 15). Each
// mutation is one transaction on a pooled connection; protobuf records are
// bytea passed in binary, so nothing is escaped by hand. Schema migrations
// are numbered, recorded in schema_migrations and applied at open under an
// advisory lock, so replicas starting together apply each exactly once.
#include <libpq-fe.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/server/store/store.h"
#include "postgres_connection.h"
#include "postgres_schema.h"

namespace pipeplan::server {
namespace {

// `text` as a double-quoted element of a PostgreSQL array literal.
std::string ArrayElement(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

template <typename Message>
absl::Status ParseRecord(const std::string& bytes, Message* m, absl::string_view what) {
  if (m->ParseFromString(bytes)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(what, " is corrupt in the store"));
}

class PostgresStore : public Store {
 public:
  PostgresStore(std::unique_ptr<PgPool> pool, PostgresStoreOptions options)
      : pool_(std::move(pool)), options_(options) {}

  // Brings the database's schema up to this planner's (postgres_schema.h).
  absl::Status Migrate() { return pool_->Transaction(MigrateSchema); }

  absl::Status CreateJob(const JobRecord& job, const v1::VersionedPlan& first) override {
    return pool_->Transaction([&](PgConnection& c) -> absl::Status {
      absl::Status s =
          c.Exec(
               "INSERT INTO jobs(id, name, create_time_ms, current_version, "
               "training_spec, state, failure) VALUES ($1, $2, $3, $4, $5, $6, $7)",
               {job.id, job.name, absl::StrCat(job.create_time_unix_ms),
                absl::StrCat(first.version()), PgBytes(job.training.SerializeAsString()),
                absl::StrCat(static_cast<int>(job.state)), job.failure_message})
              .status();
      if (s.code() == absl::StatusCode::kAlreadyExists) {
        return absl::AlreadyExistsError(absl::StrCat("job ", job.id, " already exists"));
      }
      PIPEPLAN_RETURN_IF_ERROR(s);
      return InsertPlan(c, first);
    });
  }

  absl::Status AppendPlan(const v1::VersionedPlan& plan) override {
    return pool_->Transaction([&](PgConnection& c) -> absl::Status { return AppendIn(c, plan); });
  }

  absl::Status DeleteJob(const std::string& job_id) override {
    return pool_->Transaction([&](PgConnection& c) -> absl::Status {
      PIPEPLAN_ASSIGN_OR_RETURN(PgResult r,
                                c.Exec("DELETE FROM jobs WHERE id=$1 RETURNING id", {job_id}));
      if (r.rows() == 0) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
      return absl::OkStatus();
    });
  }

  absl::Status SetJobState(const std::string& job_id, v1::JobState state,
                           const std::string& failure_message) override {
    return pool_->Transaction([&](PgConnection& c) -> absl::Status {
      return SetStateIn(c, job_id, state, failure_message);
    });
  }

  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) override {
    return pool_->Run([&](PgConnection& c) -> absl::StatusOr<v1::VersionedPlan> {
      PIPEPLAN_ASSIGN_OR_RETURN(PgResult r,
                                c.Exec("SELECT record FROM plans WHERE job_id=$1 AND version=$2",
                                       {job_id, absl::StrCat(version)}, /*binary_result=*/true));
      if (r.rows() == 0) {
        return absl::NotFoundError(absl::StrCat("job ", job_id, " has no plan version ", version));
      }
      v1::VersionedPlan plan;
      PIPEPLAN_RETURN_IF_ERROR(ParseRecord(
          r.Bytes(0, 0), &plan, absl::StrCat("job ", job_id, " plan version ", version)));
      return plan;
    });
  }

  absl::Status PutWorker(const WorkerRecord& w) override {
    return pool_->Transaction([&](PgConnection& c) -> absl::Status {
      absl::Status s =
          c.Exec(
               "INSERT INTO workers(job_id, worker_id, info, rank, state, last_heartbeat_ms, "
               "last_step) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (job_id, worker_id) "
               "DO UPDATE SET info=EXCLUDED.info, rank=EXCLUDED.rank, state=EXCLUDED.state, "
               "last_heartbeat_ms=EXCLUDED.last_heartbeat_ms, last_step=EXCLUDED.last_step",
               {w.job_id, w.info.worker_id(), PgBytes(w.info.SerializeAsString()),
                absl::StrCat(w.rank), absl::StrCat(static_cast<int>(w.state)),
                absl::StrCat(w.last_heartbeat_unix_ms), absl::StrCat(w.last_step)})
              .status();
      if (s.code() == absl::StatusCode::kNotFound) {  // foreign key: no such job
        return absl::NotFoundError(absl::StrCat("job ", w.job_id, " not found"));
      }
      return s;
    });
  }

  absl::Status AppendStepReport(const v1::ReportStepRequest& report) override {
    // One statement, committed on its own: one round trip per report (the
    // hot path of every worker), no BEGIN/COMMIT around it.
    return pool_->Run([&](PgConnection& c) -> absl::Status {
      PIPEPLAN_ASSIGN_OR_RETURN(
          PgResult r,
          c.Exec("INSERT INTO step_reports(job_id, report, time_ms, worker_id, run_id, report_seq) "
                 "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                 {report.job_id(), PgBytes(report.SerializeAsString()),
                  absl::StrCat(absl::ToUnixMillis(options_.clock->Now())), report.worker_id(),
                  report.run_id(), absl::StrCat(report.seq())}));
      (void)r;
      // Trim the job's window every TrimEvery() of its own reports (counted
      // per job and per planner, so a busy job never escapes the trim).
      if (!TrimDue(report.job_id())) return absl::OkStatus();
      const int64_t oldest_ms =
          options_.report_max_age > absl::ZeroDuration()
              ? absl::ToUnixMillis(options_.clock->Now() - options_.report_max_age)
              : std::numeric_limits<int64_t>::min();
      // Housekeeping after the report is stored: a failed trim is not the
      // report's failure (the caller would resend a stored report); the
      // next trim of the job removes what this one left.
      (void)c.Exec(
          "DELETE FROM step_reports WHERE job_id=$1 AND (time_ms < $3 OR seq <= (SELECT seq "
          "FROM step_reports WHERE job_id=$1 ORDER BY seq DESC LIMIT 1 OFFSET $2))",
          {report.job_id(), absl::StrCat(options_.report_window), absl::StrCat(oldest_ms)});
      return absl::OkStatus();
    });
  }

  absl::StatusOr<std::vector<v1::ReportStepRequest>> RecentStepReports(const std::string& job_id,
                                                                       int limit,
                                                                       int64_t max_bytes) override {
    return pool_->Run([&](PgConnection& c) -> absl::StatusOr<std::vector<v1::ReportStepRequest>> {
      // The byte bound is applied by the server, so the result this process
      // receives is bounded too: the newest report, then those whose running
      // total stays within max_bytes.
      PIPEPLAN_ASSIGN_OR_RETURN(
          PgResult r,
          c.Exec("SELECT report FROM (SELECT seq, report, row_number() OVER w AS n, "
                 "sum(octet_length(report)) OVER w AS upto FROM step_reports WHERE job_id=$1 "
                 "WINDOW w AS (ORDER BY seq DESC) ORDER BY seq DESC LIMIT $2) recent "
                 "WHERE n = 1 OR upto <= $3 ORDER BY seq DESC",
                 {job_id, absl::StrCat(std::max(0, std::min(limit, options_.report_window))),
                  absl::StrCat(max_bytes)},
                 /*binary_result=*/true));
      std::vector<v1::ReportStepRequest> out;
      for (int i = 0; i < r.rows(); ++i) {
        v1::ReportStepRequest report;
        if (report.ParseFromString(r.Bytes(i, 0))) out.push_back(std::move(report));
      }
      return out;
    });
  }

  absl::StatusOr<std::vector<StoredJob>> Load() override {
    return pool_->Transaction([&](PgConnection& c) -> absl::StatusOr<std::vector<StoredJob>> {
      std::vector<StoredJob> out;
      PIPEPLAN_RETURN_IF_ERROR(LoadJobs(c, nullptr, &out));
      PIPEPLAN_RETURN_IF_ERROR(LoadWorkers(c, nullptr, &out));
      return out;
    });
  }

  bool shared() const override { return true; }

  absl::StatusOr<std::vector<JobHead>> JobHeads() override {
    return pool_->Run([&](PgConnection& c) -> absl::StatusOr<std::vector<JobHead>> {
      PIPEPLAN_ASSIGN_OR_RETURN(
          PgResult r, c.Exec("SELECT j.id, j.current_version, j.state, j.failure, CASE WHEN "
                             "l.expires_at > clock_timestamp() THEN l.owner ELSE '' END FROM "
                             "jobs j LEFT JOIN job_leases l ON l.job_id = j.id ORDER BY j.id",
                             {}, /*binary_result=*/true));
      std::vector<JobHead> out(r.rows());
      for (int i = 0; i < r.rows(); ++i) {
        out[i].id = r.Bytes(i, 0);
        out[i].current_version = r.BigEndianInt(i, 1);
        out[i].state = static_cast<v1::JobState>(r.BigEndianInt(i, 2));
        out[i].failure_message = r.Bytes(i, 3);
        out[i].owner = r.Bytes(i, 4);
      }
      return out;
    });
  }

  absl::StatusOr<StoredJob> LoadJob(const std::string& job_id) override {
    return pool_->Transaction([&](PgConnection& c) -> absl::StatusOr<StoredJob> {
      std::vector<StoredJob> out;
      PIPEPLAN_RETURN_IF_ERROR(LoadJobs(c, &job_id, &out));
      if (out.empty()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
      PIPEPLAN_RETURN_IF_ERROR(LoadWorkers(c, &job_id, &out));
      return std::move(out[0]);
    });
  }

  absl::StatusOr<WorkerRecord> GetWorker(const std::string& job_id,
                                         const std::string& worker_id) override {
    return pool_->Run([&](PgConnection& c) -> absl::StatusOr<WorkerRecord> {
      PIPEPLAN_ASSIGN_OR_RETURN(
          PgResult r, c.Exec("SELECT job_id, info, rank, state, last_heartbeat_ms, last_step "
                             "FROM workers WHERE job_id=$1 AND worker_id=$2",
                             {job_id, worker_id}, /*binary_result=*/true));
      WorkerRecord w;
      if (r.rows() == 0 || !WorkerFromRow(r, 0, &w)) {
        return absl::NotFoundError(
            absl::StrCat("worker ", worker_id, " of job ", job_id, " not found"));
      }
      return w;
    });
  }

  absl::Status TouchWorkers(const std::vector<WorkerHeartbeat>& heartbeats) override {
    if (heartbeats.empty()) return absl::OkStatus();
    std::vector<std::string> jobs, workers, times;
    for (const WorkerHeartbeat& h : heartbeats) {
      jobs.push_back(ArrayElement(h.job_id));
      workers.push_back(ArrayElement(h.worker_id));
      times.push_back(absl::StrCat(h.unix_ms));
    }
    return pool_->Run([&](PgConnection& c) -> absl::Status {
      return c
          .Exec(
              "UPDATE workers w SET last_heartbeat_ms = GREATEST(w.last_heartbeat_ms, v.ms) "
              "FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v(job_id, worker_id, ms) "
              "WHERE w.job_id = v.job_id AND w.worker_id = v.worker_id",
              {absl::StrCat("{", absl::StrJoin(jobs, ","), "}"),
               absl::StrCat("{", absl::StrJoin(workers, ","), "}"),
               absl::StrCat("{", absl::StrJoin(times, ","), "}")})
          .status();
    });
  }

  absl::StatusOr<JobLease> ClaimJob(const std::string& job_id, const std::string& owner,
                                    const std::string& address, absl::Duration ttl,
                                    bool force) override {
    return pool_->Transaction([&](PgConnection& c) -> absl::StatusOr<JobLease> {
      return ClaimIn(c, job_id, owner, address, ttl, force);
    });
  }

  absl::StatusOr<std::vector<JobLease>> RenewJobLeases(const std::string& owner,
                                                       absl::Duration ttl) override {
    return pool_->Run([&](PgConnection& c) -> absl::StatusOr<std::vector<JobLease>> {
      PIPEPLAN_ASSIGN_OR_RETURN(
          PgResult r,
          c.Exec("UPDATE job_leases SET expires_at = clock_timestamp() + $2 * interval "
                 "'1 millisecond' WHERE owner=$1 RETURNING job_id, address, token",
                 {owner, absl::StrCat(absl::ToInt64Milliseconds(ttl))}, /*binary_result=*/true));
      std::vector<JobLease> out(r.rows());
      for (int i = 0; i < r.rows(); ++i) {
        out[i] = {r.Bytes(i, 0), owner, r.Bytes(i, 1), r.BigEndianInt(i, 2)};
      }
      return out;
    });
  }

  absl::Status AppendPlanFenced(const v1::VersionedPlan& plan, const JobLease& fence) override {
    return pool_->Transaction([&](PgConnection& c) -> absl::Status {
      PIPEPLAN_RETURN_IF_ERROR(CheckFence(c, plan.job_id(), fence));
      return AppendIn(c, plan);
    });
  }

  absl::Status SetJobStateFenced(const std::string& job_id, v1::JobState state,
                                 const std::string& failure_message,
                                 const JobLease& fence) override {
    return pool_->Transaction([&](PgConnection& c) -> absl::Status {
      PIPEPLAN_RETURN_IF_ERROR(CheckFence(c, job_id, fence));
      return SetStateIn(c, job_id, state, failure_message);
    });
  }

  absl::Status RendezvousPut(const std::string& job_id, const std::string& key,
                             const std::string& value, int64_t version) override {
    return pool_->Run([&](PgConnection& c) -> absl::Status {
      absl::Status s = c.Exec(
                            "INSERT INTO rendezvous VALUES ($1, $2, $3, $4) ON CONFLICT "
                            "(job_id, key) DO UPDATE SET value=EXCLUDED.value",
                            {job_id, key, PgBytes(value), absl::StrCat(version)})
                           .status();
      if (s.code() == absl::StatusCode::kNotFound) {
        return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
      }
      return s;
    });
  }

  absl::StatusOr<std::optional<std::string>> RendezvousFetch(const std::string& job_id,
                                                             const std::string& key) override {
    return pool_->Run([&](PgConnection& c) -> absl::StatusOr<std::optional<std::string>> {
      PIPEPLAN_ASSIGN_OR_RETURN(PgResult r,
                                c.Exec("SELECT value FROM rendezvous WHERE job_id=$1 AND key=$2",
                                       {job_id, key}, /*binary_result=*/true));
      if (r.rows() == 0) return std::optional<std::string>();
      return std::optional<std::string>(r.Bytes(0, 0));
    });
  }

  absl::Status RendezvousTrim(const std::string& job_id, int64_t oldest_kept) override {
    return pool_->Run([&](PgConnection& c) -> absl::Status {
      return c
          .Exec("DELETE FROM rendezvous WHERE job_id=$1 AND version >= 0 AND version < $2",
                {job_id, absl::StrCat(oldest_kept)})
          .status();
    });
  }

 private:
  static absl::Status AppendIn(PgConnection& c, const v1::VersionedPlan& plan) {
    // FOR UPDATE: two planners appending to one job serialise here, and the
    // second sees the first's version.
    PIPEPLAN_ASSIGN_OR_RETURN(int64_t current, CurrentVersion(c, plan.job_id(), true));
    if (plan.version() != current + 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", plan.job_id(), ": version ", plan.version(), " does not follow ", current));
    }
    PIPEPLAN_RETURN_IF_ERROR(InsertPlan(c, plan));
    return c
        .Exec("UPDATE jobs SET current_version=$1 WHERE id=$2",
              {absl::StrCat(plan.version()), plan.job_id()})
        .status();
  }

  static absl::Status SetStateIn(PgConnection& c, const std::string& job_id, v1::JobState state,
                                 const std::string& failure_message) {
    PIPEPLAN_ASSIGN_OR_RETURN(
        PgResult r, c.Exec("UPDATE jobs SET state=$1, failure=$2 WHERE id=$3 RETURNING id",
                           {absl::StrCat(static_cast<int>(state)), failure_message, job_id}));
    if (r.rows() == 0) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
    return absl::OkStatus();
  }

  // FOR SHARE: a claim (FOR UPDATE) waits until this write committed, so a
  // new owner's token is never older than a write it did not see.
  static absl::Status CheckFence(PgConnection& c, const std::string& job_id,
                                 const JobLease& fence) {
    PIPEPLAN_ASSIGN_OR_RETURN(
        PgResult r, c.Exec("SELECT 1 FROM job_leases WHERE job_id=$1 AND owner=$2 AND token=$3 "
                           "FOR SHARE",
                           {job_id, fence.owner, absl::StrCat(fence.token)}));
    if (r.rows() == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, ": this planner (", fence.owner, ", fencing token ",
                       fence.token, ") no longer owns it; another planner took it over"));
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<JobLease> ClaimIn(PgConnection& c, const std::string& job_id,
                                          const std::string& owner, const std::string& address,
                                          absl::Duration ttl, bool force) {
    const std::string ms = absl::StrCat(absl::ToInt64Milliseconds(ttl));
    PIPEPLAN_ASSIGN_OR_RETURN(PgResult held,
                              c.Exec("SELECT owner, address, token, expires_at > clock_timestamp() "
                                     "FROM job_leases WHERE job_id=$1 FOR UPDATE",
                                     {job_id}, /*binary_result=*/true));
    if (held.rows() == 0) {
      absl::Status s = c.Exec(
                            "INSERT INTO job_leases VALUES ($1, $2, $3, 1, clock_timestamp() + "
                            "$4 * interval '1 millisecond')",
                            {job_id, owner, address, ms})
                           .status();
      if (s.code() == absl::StatusCode::kNotFound) {
        return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
      }
      if (s.code() == absl::StatusCode::kAlreadyExists) {
        return absl::FailedPreconditionError(
            absl::StrCat("job ", job_id, " was claimed by another planner just now"));
      }
      PIPEPLAN_RETURN_IF_ERROR(s);
      return JobLease{job_id, owner, address, 1};
    }
    const std::string holder = held.Bytes(0, 0);
    const int64_t token = held.BigEndianInt(0, 2);
    const bool live = held.Bytes(0, 3) == std::string(1, '\1');
    if (holder != owner && live && !force) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is owned by planner ", holder, " at ", held.Bytes(0, 1)));
    }
    const int64_t next = holder == owner ? token : token + 1;
    PIPEPLAN_RETURN_IF_ERROR(c.Exec("UPDATE job_leases SET owner=$2, address=$3, token=$4, "
                                    "expires_at = clock_timestamp() + $5 * interval "
                                    "'1 millisecond' WHERE job_id=$1",
                                    {job_id, owner, address, absl::StrCat(next), ms})
                                 .status());
    return JobLease{job_id, owner, address, next};
  }

  static bool WorkerFromRow(const PgResult& r, int i, WorkerRecord* w) {
    w->job_id = r.Bytes(i, 0);
    if (!w->info.ParseFromString(r.Bytes(i, 1))) return false;
    w->rank = static_cast<int>(r.BigEndianInt(i, 2));
    w->state = static_cast<v1::WorkerState>(r.BigEndianInt(i, 3));
    w->last_heartbeat_unix_ms = r.BigEndianInt(i, 4);
    w->last_step = r.BigEndianInt(i, 5);
    return true;
  }

  bool TrimDue(const std::string& job_id) {
    // As the SQLite store: a job holds at most a sixteenth more than its window.
    const int every = std::clamp(options_.report_window / 16, 1, 256);
    absl::MutexLock l(&mu_);
    int& n = appends_since_trim_[job_id];
    if (++n < every) return false;
    n = 0;
    return true;
  }

  static absl::StatusOr<int64_t> CurrentVersion(PgConnection& c, const std::string& job_id,
                                                bool lock) {
    PIPEPLAN_ASSIGN_OR_RETURN(
        PgResult r, c.Exec(lock ? "SELECT current_version FROM jobs WHERE id=$1 FOR UPDATE"
                                : "SELECT current_version FROM jobs WHERE id=$1",
                           {job_id}));
    if (r.rows() == 0) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
    return ParseInt(r, 0, 0);
  }

  static absl::Status InsertPlan(PgConnection& c, const v1::VersionedPlan& plan) {
    absl::Status s =
        c.Exec("INSERT INTO plans(job_id, version, record) VALUES ($1, $2, $3)",
               {plan.job_id(), absl::StrCat(plan.version()), PgBytes(plan.SerializeAsString())})
            .status();
    if (s.code() == absl::StatusCode::kAlreadyExists) {
      return absl::AlreadyExistsError(
          absl::StrCat("job ", plan.job_id(), " plan version ", plan.version(), " exists"));
    }
    return s;
  }

  // `select`'s rows (binary) of one job (`only`, whose id is column `key`)
  // or of every job, ordered by `order`.
  static absl::StatusOr<PgResult> SelectRows(PgConnection& c, const std::string* only,
                                             absl::string_view select, absl::string_view key,
                                             absl::string_view order) {
    std::vector<PgParam> params;
    if (only) params.push_back(*only);
    return c.Exec(
        absl::StrCat(select, only ? absl::StrCat(" WHERE ", key, "=$1") : "", " ORDER BY ", order),
        params, /*binary_result=*/true);
  }

  // `only`: that job alone; null: every job.
  static absl::Status LoadJobs(PgConnection& c, const std::string* only,
                               std::vector<StoredJob>* out) {
    PIPEPLAN_ASSIGN_OR_RETURN(
        PgResult r,
        SelectRows(c, only,
                   "SELECT j.id, j.name, j.create_time_ms, j.current_version, p.record, "
                   "j.training_spec, j.state, j.failure FROM jobs j JOIN plans p ON "
                   "p.job_id = j.id AND p.version = j.current_version",
                   "j.id", "j.id"));
    for (int i = 0; i < r.rows(); ++i) {
      StoredJob sj;
      sj.job.id = r.Bytes(i, 0);
      sj.job.name = r.Bytes(i, 1);
      sj.job.create_time_unix_ms = r.BigEndianInt(i, 2);
      sj.job.current_version = r.BigEndianInt(i, 3);
      PIPEPLAN_RETURN_IF_ERROR(ParseRecord(r.Bytes(i, 4), &sj.current,
                                           absl::StrCat("job ", sj.job.id, " current plan")));
      PIPEPLAN_RETURN_IF_ERROR(ParseRecord(r.Bytes(i, 5), &sj.job.training,
                                           absl::StrCat("job ", sj.job.id, " training spec")));
      sj.job.state = static_cast<v1::JobState>(r.BigEndianInt(i, 6));
      sj.job.failure_message = r.Bytes(i, 7);
      out->push_back(std::move(sj));
    }
    return absl::OkStatus();
  }

  static absl::Status LoadWorkers(PgConnection& c, const std::string* only,
                                  std::vector<StoredJob>* out) {
    PIPEPLAN_ASSIGN_OR_RETURN(
        PgResult r,
        SelectRows(c, only,
                   "SELECT job_id, info, rank, state, last_heartbeat_ms, last_step FROM workers",
                   "job_id", "job_id, worker_id"));
    size_t j = 0;
    for (int i = 0; i < r.rows(); ++i) {
      WorkerRecord w;
      if (!WorkerFromRow(r, i, &w)) continue;
      // Both lists are ordered by job id.
      while (j < out->size() && (*out)[j].job.id < w.job_id) ++j;
      if (j < out->size() && (*out)[j].job.id == w.job_id) {
        (*out)[j].workers.push_back(std::move(w));
      }
    }
    return absl::OkStatus();
  }

  const std::unique_ptr<PgPool> pool_;
  const PostgresStoreOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> appends_since_trim_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

bool IsPostgresUrl(const std::string& spec) {
  return absl::StartsWith(spec, "postgres://") || absl::StartsWith(spec, "postgresql://");
}

std::string RedactedStoreUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t at = url.find('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) return url;
  const size_t colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return absl::StrCat(url.substr(0, colon + 1), "***", url.substr(at));
}

absl::StatusOr<std::unique_ptr<Store>> OpenPostgresStore(const std::string& conninfo,
                                                         PostgresStoreOptions options) {
  if (options.clock == nullptr) options.clock = RealClock();
  PIPEPLAN_ASSIGN_OR_RETURN(std::unique_ptr<PgPool> pool,
                            PgPool::Open(conninfo, options.connections));
  auto store = std::make_unique<PostgresStore>(std::move(pool), options);
  PIPEPLAN_RETURN_IF_ERROR(store->Migrate());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace pipeplan::server
