// A pipeplan-worker child process for the integration tests.
#ifndef PIPEPLAN_TESTS_INTEGRATION_WORKER_PROCESS_H_
#define PIPEPLAN_TESTS_INTEGRATION_WORKER_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pipeplan::testing {

// The flags every test worker runs with: Gloo on 127.0.0.1, 64 KiB synthetic
// messages, 20 s communication and connect timeouts. Append test-specific
// flags to the result.
inline std::vector<std::string> WorkerArgs(const std::string& planner_address,
                                           const std::string& job_id, const std::string& worker_id,
                                           const std::string& device_id) {
  return {"--planner",
          planner_address,
          "--job",
          job_id,
          "--worker-id",
          worker_id,
          "--device",
          device_id,
          "--transport",
          "gloo",
          "--listen-host",
          "127.0.0.1",
          "--max-message-bytes",
          "65536",
          "--comm-timeout-seconds",
          "20",
          "--connect-timeout-seconds",
          "20"};
}

// A pipeplan-worker child; stdout goes to a file. The destructor SIGKILLs and
// reaps it if it still runs (only this child, by pid).
class WorkerProcess {
 public:
  WorkerProcess(const std::string& dir, const std::string& id, std::vector<std::string> args)
      : out_path_(dir + "/" + id + ".out") {
    std::vector<std::string> argv = {PIPEPLAN_WORKER_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int err = open((out_path_ + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(err, 2);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
  }
  ~WorkerProcess() {
    if (pid_ > 0 && status_ < 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  void Signal(int sig) {
    if (status_ < 0) kill(pid_, sig);
  }
  // Exit code, or -1 if it still runs after `timeout`.
  int Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (status_ < 0) {
      int st = 0;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (absl::Now() > deadline) return -1;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return status_;
  }
  std::string Output() const {
    std::ifstream in(out_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    std::ifstream err(out_path_ + ".err");
    std::stringstream es;
    es << err.rdbuf();
    return ss.str() + es.str();
  }
  // Values of `key=` on lines containing `event`.
  std::vector<std::string> Values(const std::string& event, const std::string& key) const {
    std::vector<std::string> out;
    for (absl::string_view line : absl::StrSplit(Output(), '\n')) {
      if (line.find("event=" + event + " ") == absl::string_view::npos) continue;
      for (absl::string_view kv : absl::StrSplit(line, ' ')) {
        if (kv.substr(0, key.size() + 1) == key + "=") out.emplace_back(kv.substr(key.size() + 1));
      }
    }
    return out;
  }

 private:
  std::string out_path_;
  pid_t pid_ = -1;
  int status_ = -1;
};

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_INTEGRATION_WORKER_PROCESS_H_
