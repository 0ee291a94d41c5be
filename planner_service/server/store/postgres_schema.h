// The PostgreSQL store's schema: numbered migrations, applied in order at
// open and recorded in schema_migrations, under an advisory lock so that
// replicas starting together apply each exactly once. Internal to the
// PostgreSQL store.
#ifndef PIPEPLAN_SERVER_STORE_POSTGRES_SCHEMA_H_
#define PIPEPLAN_SERVER_STORE_POSTGRES_SCHEMA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "postgres_connection.h"

namespace pipeplan::server {

// Applies the migrations the database has not seen, in `c`'s transaction.
// FAILED_PRECONDITION when the database is newer than this planner.
absl::Status MigrateSchema(PgConnection& c);

// The integer in row `row`, column `col` of `r`; DATA_LOSS when it is not
// one.
absl::StatusOr<int64_t> ParseInt(const PgResult& r, int row, int col);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_STORE_POSTGRES_SCHEMA_H_
