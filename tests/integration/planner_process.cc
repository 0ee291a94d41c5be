#include "planner_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pipeplan/convert/proto_convert.h"

namespace pipeplan::testing {

namespace {

bool HasFlag(const std::vector<std::string>& args, const std::string& name) {
  for (const auto& a : args) {
    if (a == name || a.rfind(name + "=", 0) == 0) return true;
  }
  return false;
}

// Reads one line from `fd` before `deadline`; false on EOF or timeout.
bool ReadLine(int fd, std::string* line, absl::Time deadline) {
  line->clear();
  while (true) {
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return false;
    char c;
    if (read(fd, &c, 1) != 1) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerProcess>> PlannerProcess::Start(
    std::vector<std::string> args) {
  std::unique_ptr<PlannerProcess> p(new PlannerProcess());
  p->dir_ = std::make_unique<TempDir>();
  if (!HasFlag(args, "--listen")) args.insert(args.end(), {"--listen", "127.0.0.1:0"});
  if (!HasFlag(args, "--metrics-listen")) {
    args.insert(args.end(), {"--metrics-listen", "127.0.0.1:0"});
  }
  if (!HasFlag(args, "--data-dir"))
    args.insert(args.end(), {"--data-dir", p->dir_->path() + "/data"});
  p->stderr_path_ = p->dir_->path() + "/stderr.log";

  int out[2];
  if (pipe(out) != 0) return absl::InternalError("pipe");
  // $PIPEPLAN_TEST_PLANNER_BIN runs the tests against another build of the
  // planner (an installed one, or an older one for comparison).
  const char* bin = std::getenv("PIPEPLAN_TEST_PLANNER_BIN");
  std::vector<std::string> argv_s = {bin && *bin ? bin : PIPEPLAN_PLANNER_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork");
  if (pid == 0) {
    dup2(out[1], 1);
    const int err = open(p->stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err >= 0) dup2(err, 2);
    close(out[0]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  p->pid_ = pid;
  p->stdout_fd_ = out[0];
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::string line;
  while (ReadLine(p->stdout_fd_, &line, deadline)) {
    if (line.rfind("listening on ", 0) == 0) {
      p->address_ = line.substr(13);
      (void)absl::SimpleAtoi(p->address_.substr(p->address_.rfind(':') + 1), &p->port_);
      if (ReadLine(p->stdout_fd_, &line, absl::Now() + absl::Seconds(2)) &&
          line.rfind("metrics on ", 0) == 0) {
        p->metrics_address_ = line.substr(11);
        (void)absl::SimpleAtoi(line.substr(line.rfind(':') + 1), &p->metrics_port_);
      }
      return p;
    }
  }
  const int code = p->Wait(absl::Seconds(5));
  return absl::UnavailableError(
      absl::StrCat("planner did not start (exit ", code, "): ", p->stderr_text()));
}

PlannerProcess::~PlannerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

std::string PlannerProcess::stderr_text() const {
  std::ifstream in(stderr_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void PlannerProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

int PlannerProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<client::PlannerClient>> PlannerProcess::Client(
    client::ClientOptions options) const {
  options.address = address_;
  return client::PlannerClient::Connect(options);
}

int RunCommand(const std::vector<std::string>& argv_in, std::string* out, absl::Duration timeout) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::vector<std::string> argv_s = argv_in;
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  out->clear();
  const absl::Time deadline = absl::Now() + timeout;
  char buf[4096];
  while (true) {
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd p{fds[0], POLLIN, 0};
    if (ms <= 0 || poll(&p, 1, ms) <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

absl::StatusOr<std::string> ScrapeMetrics(int port, const std::string& host) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host));
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return absl::UnavailableError("connect to metrics port failed");
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string body;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) body.append(buf, static_cast<size_t>(n));
  close(fd);
  return body;
}

}  // namespace pipeplan::testing
