// libpq behind absl::Status: a connection that runs parameterised statements
// (text or binary parameters, text or binary results) and maps SQLSTATE
// classes to status codes, and a small pool that hands connections to
// transactions. Internal to the PostgreSQL store.
//
// Status mapping (SQLSTATE): 23505 unique violation -> ALREADY_EXISTS,
// 23503 foreign-key violation -> NOT_FOUND, 53100 disk full / 53200 out of
// memory / 53300 too many connections -> RESOURCE_EXHAUSTED, class 08
// (connection), 57P01..57P03 (shutdown, cannot connect now) and 25006
// (read-only transaction) and libpq's own errors (no SQLSTATE: the server
// closed the connection) -> UNAVAILABLE, 40001 / 40P01 (serialization,
// deadlock) -> ABORTED, anything else INTERNAL. A broken connection is reset
// before its next use.
#ifndef PIPEPLAN_SERVER_STORE_POSTGRES_CONNECTION_H_
#define PIPEPLAN_SERVER_STORE_POSTGRES_CONNECTION_H_

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pipeplan::server {

// A statement parameter: text (the default) or raw bytes for a bytea column.
struct PgParam {
  PgParam(std::string v) : value(std::move(v)) {}  // NOLINT: text is the common case
  PgParam(const char* v) : value(v) {}             // NOLINT
  std::string value;
  bool binary = false;
};
inline PgParam PgBytes(std::string bytes) {
  PgParam p(std::move(bytes));
  p.binary = true;
  return p;
}

// Owns a PGresult.
class PgResult {
 public:
  explicit PgResult(PGresult* r) : r_(r, &PQclear) {}
  int rows() const { return PQntuples(r_.get()); }
  // A text-format value (or a binary text/bytea value) as bytes.
  std::string Text(int row, int col) const { return Bytes(row, col); }
  std::string Bytes(int row, int col) const {
    return std::string(PQgetvalue(r_.get(), row, col), PQgetlength(r_.get(), row, col));
  }
  // A binary-format int2/int4/int8 value.
  int64_t BigEndianInt(int row, int col) const;
  const PGresult* get() const { return r_.get(); }

 private:
  std::unique_ptr<PGresult, decltype(&PQclear)> r_;
};

class PgConnection {
 public:
  // UNAVAILABLE when the server cannot be reached, FAILED_PRECONDITION for a
  // conninfo libpq rejects.
  static absl::StatusOr<std::unique_ptr<PgConnection>> Connect(const std::string& conninfo);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  absl::StatusOr<PgResult> Exec(const std::string& sql, const std::vector<PgParam>& params = {},
                                bool binary_result = false);
  // Reconnects when the connection broke; UNAVAILABLE when that fails.
  absl::Status EnsureOpen();

 private:
  explicit PgConnection(PGconn* c) : conn_(c) {}
  PGconn* conn_;
};

class PgPool {
 public:
  static absl::StatusOr<std::unique_ptr<PgPool>> Open(const std::string& conninfo, int size);

  // Runs `fn(PgConnection&)` on a free connection (waiting for one).
  template <typename Fn>
  auto Run(Fn fn) -> decltype(fn(std::declval<PgConnection&>()));

  // As Run, between BEGIN and COMMIT (ROLLBACK when `fn` fails). Retried
  // up to three times when PostgreSQL aborts it (serialization, deadlock).
  template <typename Fn>
  auto Transaction(Fn fn) -> decltype(fn(std::declval<PgConnection&>()));

 private:
  PgConnection* Acquire();
  void Release(PgConnection* c);

  absl::Mutex mu_;
  std::vector<std::unique_ptr<PgConnection>> all_;
  std::vector<PgConnection*> free_ ABSL_GUARDED_BY(mu_);
};

namespace internal {
inline absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal

template <typename Fn>
auto PgPool::Run(Fn fn) -> decltype(fn(std::declval<PgConnection&>())) {
  PgConnection* c = Acquire();
  struct Releaser {
    PgPool* pool;
    PgConnection* c;
    ~Releaser() { pool->Release(c); }
  } releaser{this, c};
  if (absl::Status open = c->EnsureOpen(); !open.ok()) return open;
  return fn(*c);
}

template <typename Fn>
auto PgPool::Transaction(Fn fn) -> decltype(fn(std::declval<PgConnection&>())) {
  using Result = decltype(fn(std::declval<PgConnection&>()));
  for (int attempt = 0;; ++attempt) {
    Result result = Run([&](PgConnection& c) -> Result {
      if (absl::StatusOr<PgResult> b = c.Exec("BEGIN"); !b.ok()) return b.status();
      Result r = fn(c);
      absl::Status s = internal::StatusOf(r);
      if (!s.ok()) {
        (void)c.Exec("ROLLBACK");
        return r;
      }
      if (absl::StatusOr<PgResult> e = c.Exec("COMMIT"); !e.ok()) {
        (void)c.Exec("ROLLBACK");
        return e.status();
      }
      return r;
    });
    if (internal::StatusOf(result).code() != absl::StatusCode::kAborted || attempt == 2) {
      return result;
    }
  }
}

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_STORE_POSTGRES_CONNECTION_H_
