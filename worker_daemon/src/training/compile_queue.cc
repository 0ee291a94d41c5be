#include "compile_queue.h"

#include <utility>

#include "absl/time/clock.h"

namespace pipeplan::worker {

CompileQueue::CompileQueue() : thread_([this] { Loop(); }) {}

CompileQueue::~CompileQueue() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  cancel_.store(true);
  thread_.join();
}

bool CompileQueue::Start(int64_t version, Job job) {
  absl::MutexLock l(&mu_);
  if (entries_.contains(version)) return false;
  // Versions below the newest one queued are never switched to.
  for (auto& [v, e] : entries_) {
    if (v < version && e.state == State::kQueued) {
      e.state = State::kDropped;
      e.job = nullptr;
    }
  }
  entries_[version].job = std::move(job);
  return true;
}

bool CompileQueue::Done(int64_t version) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(version);
  return it != entries_.end() && it->second.state == State::kDone;
}

std::optional<CompileQueue::Result> CompileQueue::Wait(int64_t version) {
  absl::MutexLock l(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = entries_.find(version);
    return stopping_ || it == entries_.end() || it->second.state == State::kDone ||
           it->second.state == State::kDropped;
  };
  mu_.Await(absl::Condition(&settled));
  auto it = entries_.find(version);
  if (it == entries_.end() || it->second.state != State::kDone) return std::nullopt;
  return it->second.result;
}

bool CompileQueue::Idle() const {
  absl::MutexLock l(&mu_);
  for (const auto& [v, e] : entries_) {
    if (e.state == State::kQueued || e.state == State::kRunning) return false;
  }
  return true;
}

bool CompileQueue::HasWork() const {
  if (stopping_) return true;
  for (const auto& [v, e] : entries_) {
    if (e.state == State::kQueued) return true;
  }
  return false;
}

void CompileQueue::Loop() {
  while (true) {
    int64_t version = 0;
    Job job;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(this, &CompileQueue::HasWork));
      if (stopping_) return;
      for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
        if (it->second.state != State::kQueued) continue;
        version = it->first;
        it->second.state = State::kRunning;
        job = std::move(it->second.job);
        break;
      }
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> dir = job(cancel_);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    absl::MutexLock l(&mu_);
    Entry& e = entries_[version];
    e.state = State::kDone;
    e.result = Result{std::move(dir), seconds};
  }
}

}  // namespace pipeplan::worker
