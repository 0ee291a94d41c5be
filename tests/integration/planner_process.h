// Starts pipeplan-planner as a child process on 127.0.0.1 (port 0) and reads
// the real ports back from its stdout ($PIPEPLAN_TEST_PLANNER_BIN, when set,
// names another planner binary to test). The destructor kills (SIGKILL) and
// reaps the child if it is still running; nothing else is ever signalled.
#ifndef PIPEPLAN_TESTS_INTEGRATION_PLANNER_PROCESS_H_
#define PIPEPLAN_TESTS_INTEGRATION_PLANNER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/client/planner_client.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "support/plan_requests.h"
#include "support/temp_dir.h"
#include "support/test_data.h"

namespace pipeplan::testing {

class PlannerProcess {
 public:
  // `args` are passed through; --listen 127.0.0.1:0 and --metrics-listen
  // 127.0.0.1:0 are added unless present, and --data-dir a fresh temp dir.
  static absl::StatusOr<std::unique_ptr<PlannerProcess>> Start(std::vector<std::string> args);
  ~PlannerProcess();

  const std::string& address() const { return address_; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  // HOST:PORT from the "metrics on" line; empty when none was printed.
  const std::string& metrics_address() const { return metrics_address_; }
  pid_t pid() const { return pid_; }
  std::string stderr_text() const;

  void Signal(int sig);
  // Exit status (WEXITSTATUS, or 128+signal), or -1 if still running after
  // `timeout` (then it is killed).
  int Wait(absl::Duration timeout);

  absl::StatusOr<std::unique_ptr<client::PlannerClient>> Client(
      client::ClientOptions options = {}) const;

 private:
  PlannerProcess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string address_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string metrics_address_;
  std::string stderr_path_;
  std::unique_ptr<TempDir> dir_;
};

// Runs `argv` (no shell), returns exit code; stdout into *out (bounded time).
int RunCommand(const std::vector<std::string>& argv, std::string* out,
               absl::Duration timeout = absl::Seconds(60));

// GET http://host:port/metrics (host: an IPv4 address).
absl::StatusOr<std::string> ScrapeMetrics(int port, const std::string& host = "127.0.0.1");

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_INTEGRATION_PLANNER_PROCESS_H_
