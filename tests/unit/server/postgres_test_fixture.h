// The fixture of the PostgreSQL store tests: one real server per test suite
// (started by the test from Debian's binaries, support/postgres_server.h), a
// fresh database per test, and a skip naming the reason when PostgreSQL is
// not installed (any other start failure fails the test).
#ifndef PIPEPLAN_TESTS_UNIT_SERVER_POSTGRES_TEST_FIXTURE_H_
#define PIPEPLAN_TESTS_UNIT_SERVER_POSTGRES_TEST_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeplan/server/store/store.h"
#include "support/postgres_server.h"

namespace pipeplan::server {

// A plan version of `job` whose reason names who wrote it.
inline v1::VersionedPlan Version(const std::string& job, int64_t v, const std::string& by) {
  v1::VersionedPlan p;
  p.set_job_id(job);
  p.set_version(v);
  p.set_reason(by);
  return p;
}

class PostgresDatabaseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = testing::PostgresServer::Start();
    if (server.ok()) {
      server_ = server->release();
    } else {
      error_ = new absl::Status(server.status());
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (server_ == nullptr) {
      if (error_->code() == absl::StatusCode::kFailedPrecondition) GTEST_SKIP() << *error_;
      FAIL() << *error_;
    }
    database_ = absl::StrCat("test_db_", ++databases_);
    auto url = server_->CreateDatabase(database_);
    ASSERT_TRUE(url.ok()) << url.status();
    url_ = *url;
  }
  // A store on this test's database (null, with a failure, when it cannot
  // be opened).
  std::unique_ptr<Store> Open() {
    auto s = OpenPostgresStore(url_, {.connections = 2});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  static inline testing::PostgresServer* server_ = nullptr;
  static inline absl::Status* error_ = nullptr;
  static inline int databases_ = 0;
  std::string database_;  // this test's database
  std::string url_;
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_TESTS_UNIT_SERVER_POSTGRES_TEST_FIXTURE_H_
