#include "postgres_connection.h"

#include <arpa/inet.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace pipeplan::server {
namespace {

absl::StatusCode CodeForSqlState(absl::string_view state) {
  // libpq's own errors (the server closed the connection, a timeout) carry
  // no SQLSTATE: the statement never ran to an answer.
  if (state.empty()) return absl::StatusCode::kUnavailable;
  if (state == "23505") return absl::StatusCode::kAlreadyExists;
  if (state == "23503") return absl::StatusCode::kNotFound;
  if (state == "53100" || state == "53200" || state == "53300") {
    return absl::StatusCode::kResourceExhausted;
  }
  if (absl::StartsWith(state, "08") || state == "57P01" || state == "57P02" || state == "57P03" ||
      state == "25006") {
    return absl::StatusCode::kUnavailable;
  }
  if (state == "40001" || state == "40P01") return absl::StatusCode::kAborted;
  return absl::StatusCode::kInternal;
}

std::string ConnectionMessage(PGconn* c) {
  return std::string(absl::StripTrailingAsciiWhitespace(PQerrorMessage(c)));
}

}  // namespace

int64_t PgResult::BigEndianInt(int row, int col) const {
  const char* p = PQgetvalue(r_.get(), row, col);
  const int n = PQgetlength(r_.get(), row, col);
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  // Sign-extend the narrower integer types.
  if (n > 0 && n < 8 && (static_cast<unsigned char>(p[0]) & 0x80)) v |= ~uint64_t{0} << (8 * n);
  return static_cast<int64_t>(v);
}

absl::StatusOr<std::unique_ptr<PgConnection>> PgConnection::Connect(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &err);
  if (parsed == nullptr) {
    std::string msg = err ? err : "cannot parse";
    PQfreemem(err);
    return absl::FailedPreconditionError(
        absl::StrCat("--store: ", absl::StripTrailingAsciiWhitespace(msg)));
  }
  PQconninfoFree(parsed);
  PGconn* c = PQconnectdb(conninfo.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::string msg = ConnectionMessage(c);
    PQfinish(c);
    return absl::UnavailableError(absl::StrCat("cannot connect to PostgreSQL: ", msg));
  }
  // Keep the server's notices (e.g. "relation exists, skipping") out of stderr.
  PQsetNoticeProcessor(
      c, [](void*, const char*) {}, nullptr);
  return std::unique_ptr<PgConnection>(new PgConnection(c));
}

PgConnection::~PgConnection() { PQfinish(conn_); }

absl::Status PgConnection::EnsureOpen() {
  if (PQstatus(conn_) == CONNECTION_OK) return absl::OkStatus();
  PQreset(conn_);
  if (PQstatus(conn_) == CONNECTION_OK) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("PostgreSQL connection lost: ", ConnectionMessage(conn_)));
}

absl::StatusOr<PgResult> PgConnection::Exec(const std::string& sql,
                                            const std::vector<PgParam>& params,
                                            bool binary_result) {
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  for (const PgParam& p : params) {
    values.push_back(p.value.data());
    lengths.push_back(static_cast<int>(p.value.size()));
    formats.push_back(p.binary ? 1 : 0);
  }
  // Without parameters the simple protocol runs it: a migration is several
  // statements, which a prepared statement cannot hold.
  PgResult r(params.empty() && !binary_result
                 ? PQexec(conn_, sql.c_str())
                 : PQexecParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr,
                                values.data(), lengths.data(), formats.data(),
                                binary_result ? 1 : 0));
  const ExecStatusType st = r.get() ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
  if (r.get() == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    return absl::UnavailableError(
        absl::StrCat("PostgreSQL connection lost: ", ConnectionMessage(conn_)));
  }
  const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
  const absl::string_view sqlstate = state ? state : "";
  return absl::Status(CodeForSqlState(sqlstate),
                      absl::StrCat("PostgreSQL ", sqlstate, ": ",
                                   absl::StripTrailingAsciiWhitespace(
                                       PQresultErrorField(r.get(), PG_DIAG_MESSAGE_PRIMARY)
                                           ? PQresultErrorField(r.get(), PG_DIAG_MESSAGE_PRIMARY)
                                           : PQresultErrorMessage(r.get()))));
}

absl::StatusOr<std::unique_ptr<PgPool>> PgPool::Open(const std::string& conninfo, int size) {
  auto pool = std::unique_ptr<PgPool>(new PgPool());
  for (int i = 0; i < std::max(1, size); ++i) {
    absl::StatusOr<std::unique_ptr<PgConnection>> c = PgConnection::Connect(conninfo);
    if (!c.ok()) return c.status();
    pool->all_.push_back(*std::move(c));
  }
  absl::MutexLock l(&pool->mu_);
  for (auto& c : pool->all_) pool->free_.push_back(c.get());
  return pool;
}

PgConnection* PgPool::Acquire() {
  absl::MutexLock l(&mu_,
                    absl::Condition(
                        +[](std::vector<PgConnection*>* free) { return !free->empty(); }, &free_));
  PgConnection* c = free_.back();
  free_.pop_back();
  return c;
}

void PgPool::Release(PgConnection* c) {
  absl::MutexLock l(&mu_);
  free_.push_back(c);
}

}  // namespace pipeplan::server
