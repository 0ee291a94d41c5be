#include "pipeplan/worker/transport/in_memory_transport.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace pipeplan::worker {
namespace {

class DoneOp final : public PendingOp {
 public:
  absl::Status Wait(absl::Duration) override { return absl::OkStatus(); }
};

absl::Status MemoryAborted(int rank) {
  return absl::AbortedError(absl::StrCat("the transport of rank ", rank, " was aborted"));
}

}  // namespace

class MemoryRecv final : public PendingOp {
 public:
  MemoryRecv(MemoryHub* hub, MemoryHub::Key key, std::span<std::byte> data)
      : hub_(hub), key_(key), data_(data) {}
  absl::Status Wait(absl::Duration timeout) override {
    absl::MutexLock l(&hub_->mu_);
    const int me = std::get<1>(key_);
    auto ready = [this, me]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub_->mu_) {
      return hub_->mailbox_.contains(key_) || hub_->aborted_[me];
    };
    const bool done = hub_->mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    if (hub_->aborted_[me]) return MemoryAborted(me);
    if (!done) {
      return absl::DeadlineExceededError(absl::StrCat("no message from rank ", std::get<0>(key_),
                                                      " with tag ", std::get<2>(key_), " within ",
                                                      absl::FormatDuration(timeout)));
    }
    auto it = hub_->mailbox_.find(key_);
    if (it->second.size() != data_.size()) {
      return absl::InternalError(absl::StrCat("message from rank ", std::get<0>(key_), " has ",
                                              it->second.size(), " bytes, the receive expects ",
                                              data_.size()));
    }
    // An empty message has null data, which memcpy may not be given.
    if (!data_.empty()) std::memcpy(data_.data(), it->second.data(), data_.size());
    hub_->mailbox_.erase(it);
    return absl::OkStatus();
  }

 private:
  MemoryHub* hub_;
  MemoryHub::Key key_;
  std::span<std::byte> data_;
};

class MemoryTransport final : public Transport {
 public:
  MemoryTransport(MemoryHub* hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  std::string name() const override { return "memory"; }

  absl::StatusOr<std::unique_ptr<PendingOp>> Send(int peer, uint64_t tag,
                                                  std::span<const std::byte> data) override {
    absl::MutexLock l(&hub_->mu_);
    if (hub_->aborted_[rank_]) return MemoryAborted(rank_);
    auto [it, inserted] = hub_->mailbox_.try_emplace(MemoryHub::Key{rank_, peer, tag});
    if (!inserted) {
      return absl::InternalError(
          absl::StrCat("rank ", rank_, " sent tag ", tag, " to rank ", peer, " twice"));
    }
    it->second.assign(data.begin(), data.end());
    return std::unique_ptr<PendingOp>(new DoneOp());
  }

  absl::StatusOr<std::unique_ptr<PendingOp>> Recv(int peer, uint64_t tag,
                                                  std::span<std::byte> data) override {
    return std::unique_ptr<PendingOp>(new MemoryRecv(hub_, MemoryHub::Key{peer, rank_, tag}, data));
  }

  absl::StatusOr<int64_t> AllReduceMax(int64_t value, absl::Duration timeout) override {
    absl::MutexLock l(&hub_->mu_);
    if (hub_->aborted_[rank_]) return MemoryAborted(rank_);
    const int64_t generation = hub_->reduce_generation_;
    hub_->reduce_value_ = hub_->reduce_arrived_ == 0 ? value : std::max(hub_->reduce_value_, value);
    if (++hub_->reduce_arrived_ == hub_->size()) {
      hub_->reduce_result_ = hub_->reduce_value_;
      hub_->reduce_arrived_ = 0;
      ++hub_->reduce_generation_;
      return hub_->reduce_result_;
    }
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(hub_->mu_) {
      return hub_->reduce_generation_ != generation || hub_->aborted_[rank_];
    };
    const bool reduced = hub_->mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
    if (hub_->aborted_[rank_]) return MemoryAborted(rank_);
    if (!reduced) {
      return absl::DeadlineExceededError("not every rank joined the all-reduce");
    }
    return hub_->reduce_result_;
  }

  void Abort() override {
    absl::MutexLock l(&hub_->mu_);
    hub_->aborted_[rank_] = true;
  }

 private:
  MemoryHub* hub_;
  int rank_;
};

std::unique_ptr<Transport> MemoryHub::Connect(int rank) {
  return std::make_unique<MemoryTransport>(this, rank);
}

}  // namespace pipeplan::worker
