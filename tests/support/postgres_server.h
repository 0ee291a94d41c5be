// A real PostgreSQL server for one test binary: Debian's initdb / pg_ctl in a
// fresh temp dir, listening on a unix socket only (no TCP), trust auth,
// fsync off. initdb refuses root, so when the test runs as root the server
// runs as the `postgres` user (runuser). Stopped (immediate) and removed on
// destruction.
#ifndef PIPEPLAN_TESTS_SUPPORT_POSTGRES_SERVER_H_
#define PIPEPLAN_TESTS_SUPPORT_POSTGRES_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace pipeplan::testing {

class PostgresServer {
 public:
  // FAILED_PRECONDITION (the reason to skip) when Debian's PostgreSQL
  // binaries are not installed; INTERNAL (with the server log's tail) when
  // they fail.
  static absl::StatusOr<std::unique_ptr<PostgresServer>> Start();
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // A postgresql:// URI of database `db` on this server.
  std::string Url(const std::string& db = "postgres") const;
  // Creates a fresh database and returns its URI.
  absl::StatusOr<std::string> CreateDatabase(const std::string& name);
  // Runs `sql` in database `db` with psql (ON_ERROR_STOP).
  absl::Status RunSql(const std::string& db, const std::string& sql) const;
  // Stops the server at once (no shutdown checkpoint: a crash as far as the
  // data is concerned), then starts it again on the same data.
  absl::Status Restart();

 private:
  PostgresServer() = default;
  absl::Status Run(const std::string& command) const;
  absl::Status StartServer();

  std::string bin_;   // directory of initdb, pg_ctl, psql
  std::string root_;  // temp dir: data/, log, the socket
  bool as_postgres_user_ = false;
};

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_SUPPORT_POSTGRES_SERVER_H_
