#include "support/postgres_server.h"

#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pipeplan::testing {
namespace {

// The newest /usr/lib/postgresql/<major>/bin holding initdb, or $PIPEPLAN_PG_BIN.
std::string FindBinDir() {
  if (const char* env = getenv("PIPEPLAN_PG_BIN"); env && *env) return env;
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    if (std::filesystem::exists(e.path() / "bin" / "initdb")) {
      found.push_back((e.path() / "bin").string());
    }
  }
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return found.empty() ? "" : found.back();
}

std::string Tail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresServer>> PostgresServer::Start() {
  std::unique_ptr<PostgresServer> s(new PostgresServer());
  s->bin_ = FindBinDir();
  if (s->bin_.empty()) {
    return absl::FailedPreconditionError(
        "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb; apt-get install "
        "postgresql-15, or set PIPEPLAN_PG_BIN)");
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "pipeplan-pg-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  s->root_ = tmpl;
  if (geteuid() == 0) {
    const passwd* pg = getpwnam("postgres");
    if (pg == nullptr) {
      return absl::FailedPreconditionError("running as root and there is no postgres user");
    }
    s->as_postgres_user_ = true;
    if (chown(s->root_.c_str(), pg->pw_uid, pg->pw_gid) != 0) {
      return absl::InternalError(absl::StrCat("cannot chown ", s->root_));
    }
  }
  if (absl::Status st = s->Run(absl::StrCat(s->bin_, "/initdb -D ", s->root_,
                                            "/data -A trust -U pipeplan --no-sync --no-locale "
                                            "-E UTF8 > ",
                                            s->root_, "/initdb.log 2>&1"));
      !st.ok()) {
    return absl::InternalError(
        absl::StrCat("initdb failed: ", st.message(), "\n", Tail(s->root_ + "/initdb.log")));
  }
  if (absl::Status st = s->StartServer(); !st.ok()) return st;
  return s;
}

absl::Status PostgresServer::StartServer() {
  const std::string options =
      absl::StrCat("-k ", root_, " -c listen_addresses='' -c fsync=off -c full_page_writes=off ",
                   "-c max_connections=200");
  absl::Status st =
      Run(absl::StrCat(bin_, "/pg_ctl -D ", root_, "/data -l ", root_, "/server.log -w -t 60 -o \"",
                       options, "\" start > /dev/null 2>&1"));
  if (!st.ok()) {
    return absl::InternalError(
        absl::StrCat("pg_ctl start failed: ", st.message(), "\n", Tail(root_ + "/server.log")));
  }
  return absl::OkStatus();
}

PostgresServer::~PostgresServer() {
  if (root_.empty()) return;
  (void)Run(
      absl::StrCat(bin_, "/pg_ctl -D ", root_, "/data -m immediate -w stop > /dev/null 2>&1"));
  std::error_code ec;
  std::filesystem::remove_all(root_, ec);
}

std::string PostgresServer::Url(const std::string& db) const {
  return absl::StrCat("postgresql:///", db, "?host=", root_, "&user=pipeplan");
}

absl::StatusOr<std::string> PostgresServer::CreateDatabase(const std::string& name) {
  absl::Status st = RunSql("postgres", absl::StrCat("CREATE DATABASE \"", name, "\""));
  if (!st.ok()) return absl::InternalError(absl::StrCat("CREATE DATABASE ", name, " failed"));
  return Url(name);
}

absl::Status PostgresServer::RunSql(const std::string& db, const std::string& sql) const {
  const std::string file = root_ + "/run.sql";
  {
    std::ofstream out(file);
    out << sql << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", file));
  }
  chmod(file.c_str(), 0644);
  return Run(absl::StrCat(bin_, "/psql -q -v ON_ERROR_STOP=1 -h ", root_, " -U pipeplan -d ", db,
                          " -f ", file, " > /dev/null 2>&1"));
}

absl::Status PostgresServer::Restart() {
  (void)Run(
      absl::StrCat(bin_, "/pg_ctl -D ", root_, "/data -m immediate -w stop > /dev/null 2>&1"));
  return StartServer();
}

absl::Status PostgresServer::Run(const std::string& command) const {
  std::string line = command;
  if (as_postgres_user_) {
    // One double-quoted argument for sh -c, run as the postgres user.
    line = "runuser -u postgres -- sh -c \"";
    for (char c : command) {
      if (c == '"' || c == '\\' || c == '$' || c == '`') line.push_back('\\');
      line.push_back(c);
    }
    line.push_back('"');
  }
  const int rc = std::system(line.c_str());
  if (rc != 0) return absl::InternalError(absl::StrCat("exit status ", rc, ": ", command));
  return absl::OkStatus();
}

}  // namespace pipeplan::testing
