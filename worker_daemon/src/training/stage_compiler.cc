#include "stage_compiler.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "pipeplan/common/status_macros.h"

extern char** environ;

namespace pipeplan::worker {
namespace {

// FNV-1a: a stable key across processes and builds (absl::Hash is seeded).
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

struct ChildResult {
  int exit_code = -1;  // -1: killed or did not exit
  std::string stderr_tail;
  bool timed_out = false;
  bool cancelled = false;
};

// Reads the child's stderr until it closes, the deadline passes or `cancel`.
void DrainUntil(int fd, absl::Time deadline, const std::atomic<bool>* cancel, ChildResult* result) {
  char buf[4096];
  std::string* tail = &result->stderr_tail;
  while (true) {
    if (cancel != nullptr && cancel->load()) {
      result->cancelled = true;
      return;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      result->timed_out = true;
      return;
    }
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left), 1000));
    if (poll(&p, 1, ms) < 0 && errno != EINTR) return;
    if (!(p.revents & (POLLIN | POLLHUP))) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return;
    tail->append(buf, static_cast<size_t>(n));
    if (tail->size() > 8192) tail->erase(0, tail->size() - 8192);
  }
}

// Runs argv; with `niceness`, at that CPU priority, its pid written to
// `pid_file` while it runs (for BoostNicedCompiler).
absl::StatusOr<ChildResult> Run(const std::vector<std::string>& argv, absl::Duration timeout,
                                const std::atomic<bool>* cancel, int niceness,
                                const std::string& pid_file) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipefd[1]);
  if (rc != 0) {
    close(pipefd[0]);
    return absl::InternalError(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(rc)));
  }
  // Before the interpreter starts its threads, which inherit it. Best
  // effort: a compile at normal priority is only slower for the others.
  if (niceness != 0) {
    setpriority(PRIO_PROCESS, pid, niceness);
    std::ofstream(pid_file) << pid << "\n";
  }
  ChildResult result;
  DrainUntil(pipefd[0], absl::Now() + timeout, cancel, &result);
  close(pipefd[0]);
  if (result.timed_out || result.cancelled) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

}  // namespace

uint64_t CompilerFingerprint(const std::string& script) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files = {script};
  std::error_code ec;
  const fs::path package = fs::path(script).parent_path() / "pipeplan";
  for (fs::recursive_directory_iterator it(package, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().extension() == ".py") files.push_back(it->path());
  }
  std::sort(files.begin() + 1, files.end());
  std::string bytes;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return 0;
    absl::StrAppend(&bytes, f.lexically_relative(package.parent_path()).string(), "\n",
                    std::string(std::istreambuf_iterator<char>(in), {}), "\n");
  }
  return Fnv1a(bytes);
}

std::string CompiledStagesDir(const StageCompileRequest& r) {
  const std::string key = absl::StrCat(absl::StrJoin(r.node_stage, ","), "/", r.microbatch_size,
                                       "/", CompilerFingerprint(r.script));
  return absl::StrFormat("%s/%s-%016x-mb%d", r.cache_dir, r.package_digest.substr(0, 16),
                         Fnv1a(key), r.microbatch_size);
}

namespace {

// An exclusive flock on `path`, released when destroyed or when the process
// dies (a kill -9 included).
class CompileLock {
 public:
  ~CompileLock() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }
  // Waits for the lock, polling so that `cancel` and `deadline` end the wait.
  // `on_wait` runs once when the lock is held by another.
  absl::Status Acquire(const std::string& path, const std::atomic<bool>* cancel,
                       absl::Time deadline, const std::function<void()>& on_wait) {
    fd_ = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ < 0) return absl::InternalError(absl::StrCat("cannot open ", path));
    bool waited = false;
    while (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;  // before on_wait's own calls
      if (error != EWOULDBLOCK && error != EINTR) {
        return absl::InternalError(absl::StrCat("cannot lock ", path, ": ", std::strerror(error)));
      }
      if (!waited && on_wait) on_wait();
      waited = true;
      if (cancel != nullptr && cancel->load()) {
        return absl::CancelledError("stage compilation cancelled");
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("waited too long for ", path));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::OkStatus();
  }

 private:
  int fd_ = -1;
};

// A compile at normal priority that waits for a compile ahead of need of
// the same split (niced, contingency_compiler.h) raises that one's
// priority to its own: a survivor of a loss must not wait on a compiler
// that other work starves. Best effort (raising needs CAP_SYS_NICE; the
// pid file may be gone or stale).
void BoostNicedCompiler(const std::string& pid_file) {
  std::ifstream in(pid_file);
  pid_t pid = 0;
  if (in >> pid && pid > 0) setpriority(PRIO_PROCESS, pid, 0);
}

}  // namespace

absl::StatusOr<std::string> CompileStages(const StageCompileRequest& r) {
  const std::string out = CompiledStagesDir(r);
  if (std::filesystem::exists(out + "/stages.json")) return out;
  std::error_code ec;
  std::filesystem::create_directories(r.cache_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", r.cache_dir, ": ", ec.message()));
  }
  // The workers of one host share the cache and, after a loss, all compile
  // the same new split at once: one compiles, the others wait and read its
  // stages. On a host of few cores, N compilers at once took about N times
  // as long each (issue 26: the survivors' first step waits on this).
  CompileLock lock;
  const std::string pid_file = out + ".pid";
  std::function<void()> on_wait;
  if (r.niceness == 0) on_wait = [&] { BoostNicedCompiler(pid_file); };
  PIPEPLAN_RETURN_IF_ERROR(lock.Acquire(out + ".lock", r.cancel, absl::Now() + r.timeout, on_wait));
  if (std::filesystem::exists(out + "/stages.json")) return out;
  // The assignment goes in a file: a long node_stage list would overflow argv.
  const std::string node_stage = absl::StrCat(out, ".node_stage.", getpid(), ".json");
  {
    std::ofstream f(node_stage);
    f << "{\"node_stage\": [" << absl::StrJoin(r.node_stage, ", ") << "]}\n";
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", node_stage));
  }
  absl::StatusOr<ChildResult> child =
      Run({r.python, r.script, "--package", r.package_dir, "--node-stage", node_stage,
           "--microbatch-size", absl::StrCat(r.microbatch_size), "--out", out},
          r.timeout, r.cancel, r.niceness, pid_file);
  std::filesystem::remove(node_stage, ec);
  if (r.niceness != 0) std::filesystem::remove(pid_file, ec);
  if (!child.ok()) return child.status();
  if (child->cancelled) return absl::CancelledError("stage compilation cancelled");
  if (child->timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("stage compilation took longer than ", absl::FormatDuration(r.timeout)));
  }
  if (child->exit_code == 2) {
    return absl::InvalidArgumentError(absl::StrCat("stage compiler: ", child->stderr_tail));
  }
  if (child->exit_code != 0 || !std::filesystem::exists(out + "/stages.json")) {
    return absl::InternalError(
        absl::StrCat("stage compiler exited ", child->exit_code, ": ", child->stderr_tail));
  }
  return out;
}

}  // namespace pipeplan::worker
