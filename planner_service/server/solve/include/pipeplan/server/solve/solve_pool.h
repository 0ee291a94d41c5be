// A bounded pool of solver threads. Solves never run on gRPC threads: a
// handler submits a task here and the task completes the RPC.
//
// Admission is bounded: at most `max_pending` tasks may be queued or running
// at once; Submit beyond that fails with RESOURCE_EXHAUSTED and the task is
// not run. Thread safety: all methods may be called from any thread.
#ifndef PIPEPLAN_SERVER_SOLVE_SOLVE_POOL_H_
#define PIPEPLAN_SERVER_SOLVE_SOLVE_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pipeplan::server {

class SolvePool {
 public:
  // REQUIRES: threads >= 1, max_pending >= threads.
  SolvePool(int threads, int max_pending);
  // Runs every task already admitted, then joins the threads.
  ~SolvePool();
  SolvePool(const SolvePool&) = delete;
  SolvePool& operator=(const SolvePool&) = delete;

  // RESOURCE_EXHAUSTED when `max_pending` tasks are already admitted;
  // UNAVAILABLE after Shutdown. On error `task` is not run.
  absl::Status Submit(std::function<void()> task);

  // Called (outside the pool's lock) with (running, queued) after every
  // change; set before the first Submit. For gauges.
  void SetObserver(std::function<void(int running, int queued)> observer);

  // Stops admitting; runs what was admitted; joins. Idempotent.
  void Shutdown();

  int running() const;
  int queued() const;
  // Blocks until nothing is queued or running, or `timeout` passes; returns
  // whether the pool went idle.
  bool WaitIdle(absl::Duration timeout) const;

 private:
  void Loop();
  void Notify();

  const int max_pending_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(int, int)> observer_;
  std::vector<std::thread> threads_;
};

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_SOLVE_SOLVE_POOL_H_
