#include "pipeplan/server/solve/solve_pool.h"

#include <algorithm>
#include <utility>

namespace pipeplan::server {

SolvePool::SolvePool(int threads, int max_pending)
    : max_pending_(std::max(max_pending, std::max(threads, 1))) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Loop(); });
}

SolvePool::~SolvePool() { Shutdown(); }

absl::Status SolvePool::Submit(std::function<void()> task) {
  absl::MutexLock l(&mu_);
  if (stopping_) return absl::UnavailableError("the planner is shutting down");
  if (static_cast<int>(queue_.size()) + running_ >= max_pending_) {
    return absl::ResourceExhaustedError("too many concurrent solves (max_concurrent_solves=" +
                                        std::to_string(max_pending_) + "); retry later");
  }
  queue_.push_back(std::move(task));
  return absl::OkStatus();
}

void SolvePool::SetObserver(std::function<void(int running, int queued)> observer) {
  observer_ = std::move(observer);
}

void SolvePool::Notify() {
  if (!observer_) return;
  int running, queued;
  {
    absl::MutexLock l(&mu_);
    running = running_;
    queued = static_cast<int>(queue_.size());
  }
  observer_(running, queued);
}

void SolvePool::Shutdown() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

int SolvePool::running() const {
  absl::MutexLock l(&mu_);
  return running_;
}

int SolvePool::queued() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(queue_.size());
}

bool SolvePool::WaitIdle(absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return queue_.empty() && running_ == 0; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void SolvePool::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    Notify();
    task();
    {
      absl::MutexLock l(&mu_);
      --running_;
    }
    Notify();
  }
}

}  // namespace pipeplan::server
