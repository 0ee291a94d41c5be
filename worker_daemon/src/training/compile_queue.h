// Compiling the stages of a plan version on a background thread, so that the
// step loop keeps training on the running version meanwhile and switches at a
// step boundary once the new version's stages are ready.
//
// The queue knows versions and closures, not plans: the training session
// hands it, per version, the work that fetches the plan and compiles its
// stages (StageCompileRequest), and later waits for the result. One thread
// runs one job at a time, the newest version first; an older version still
// queued when a newer one arrives is dropped (every rank switches to the
// newest version the ranks know, so nobody needs it) and Wait returns
// nullopt for it, so the caller compiles it itself.
//
// Thread safety: every method may be called from any thread. The destructor
// sets the cancel flag the jobs were given and joins the thread.
#ifndef PIPEPLAN_WORKER_SRC_COMPILE_QUEUE_H_
#define PIPEPLAN_WORKER_SRC_COMPILE_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pipeplan::worker {

class CompileQueue {
 public:
  // The work for one version: the compiled stages' directory. `cancel`
  // turns true when the queue is destroyed; a job should then give up soon.
  using Job = std::function<absl::StatusOr<std::string>(const std::atomic<bool>& cancel)>;

  struct Result {
    absl::StatusOr<std::string> dir;
    // Wall time the job ran.
    double seconds = 0;
  };

  CompileQueue();
  ~CompileQueue();
  CompileQueue(const CompileQueue&) = delete;
  CompileQueue& operator=(const CompileQueue&) = delete;

  // Queues `job` for `version` unless that version was queued before (then
  // false). Returns at once.
  bool Start(int64_t version, Job job) ABSL_LOCKS_EXCLUDED(mu_);
  // True when no job is queued or running: compiles ahead of need
  // (contingency_compiler.h) start only then.
  bool Idle() const ABSL_LOCKS_EXCLUDED(mu_);
  // True when `version`'s job has finished (successfully or not).
  bool Done(int64_t version) const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until `version`'s job finishes and returns its result; nullopt at
  // once when the version was never queued or was dropped unrun.
  std::optional<Result> Wait(int64_t version) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class State { kQueued, kRunning, kDone, kDropped };
  struct Entry {
    State state = State::kQueued;
    Job job;
    std::optional<Result> result;
  };
  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<int64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_COMPILE_QUEUE_H_
