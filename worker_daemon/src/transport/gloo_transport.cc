#include "pipeplan/worker/transport/gloo_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace pipeplan::worker {
namespace {

// Tags at or above this are the transport's own (AllReduceMax).
constexpr uint64_t kControlTag = uint64_t{1} << 60;

std::chrono::milliseconds Ms(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

absl::Status FromException(const std::exception& e, const std::string& what) {
  std::string msg = e.what();
  if (msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": ", msg));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", msg));
}

absl::Status GlooAborted() { return absl::AbortedError("the gloo transport was aborted"); }

class GlooOp;

// The ops of one transport that may be blocked in a wait, so that Abort (from
// another thread) can end their waits. Shared by the transport and its ops.
class PendingWaits {
 public:
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  void Add(GlooOp* op) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    ops_.insert(op);
  }
  void Remove(GlooOp* op) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    ops_.erase(op);
  }
  // Sets the flag first: an op registered after the sweep below sees it in
  // its Wait.
  void AbortAll() ABSL_LOCKS_EXCLUDED(mu_);
  // `failure` of an op with `peer`: UNAVAILABLE (its socket closed or
  // reset) marks the peer unreachable. Returns `failure`.
  absl::Status Failed(int peer, absl::Status failure) ABSL_LOCKS_EXCLUDED(mu_) {
    if (failure.code() == absl::StatusCode::kUnavailable) {
      absl::MutexLock l(&mu_);
      unreachable_.insert(peer);
    }
    return failure;
  }
  std::vector<int> Unreachable() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    std::vector<int> out(unreachable_.begin(), unreachable_.end());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::atomic<bool> aborted_{false};
  mutable absl::Mutex mu_;
  absl::flat_hash_set<GlooOp*> ops_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int> unreachable_ ABSL_GUARDED_BY(mu_);
};

class GlooOp final : public PendingOp {
 public:
  GlooOp(std::unique_ptr<gloo::transport::UnboundBuffer> buffer, bool send, int peer,
         std::shared_ptr<PendingWaits> waits)
      : buffer_(std::move(buffer)), send_(send), peer_(peer), waits_(std::move(waits)) {
    if (buffer_) waits_->Add(this);
  }
  ~GlooOp() override {
    if (buffer_) waits_->Remove(this);
  }
  absl::Status Wait(absl::Duration timeout) override {
    if (!buffer_) return absl::OkStatus();
    if (waits_->aborted()) return GlooAborted();
    try {
      const bool done = send_ ? buffer_->waitSend(Ms(timeout)) : buffer_->waitRecv(Ms(timeout));
      if (!done) return GlooAborted();
    } catch (const std::exception& e) {
      return waits_->Failed(
          peer_, FromException(e, absl::StrCat(send_ ? "send to" : "recv from", " rank ", peer_)));
    }
    return absl::OkStatus();
  }
  // Thread-safe in Gloo; a wait that has not begun returns at once.
  void AbortWait() {
    if (send_) {
      buffer_->abortWaitSend();
    } else {
      buffer_->abortWaitRecv();
    }
  }

 private:
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  bool send_;
  int peer_;
  std::shared_ptr<PendingWaits> waits_;
};

void PendingWaits::AbortAll() {
  aborted_.store(true, std::memory_order_release);
  absl::MutexLock l(&mu_);
  for (GlooOp* op : ops_) op->AbortWait();
}

class GlooTransport final : public Transport {
 public:
  GlooTransport(std::shared_ptr<gloo::rendezvous::Context> context, absl::Duration timeout)
      : context_(std::move(context)), timeout_(timeout) {}
  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string name() const override { return "gloo"; }

  absl::StatusOr<std::unique_ptr<PendingOp>> Send(int peer, uint64_t tag,
                                                  std::span<const std::byte> data) override {
    return Post(true, peer, tag, const_cast<std::byte*>(data.data()), data.size());
  }
  absl::StatusOr<std::unique_ptr<PendingOp>> Recv(int peer, uint64_t tag,
                                                  std::span<std::byte> data) override {
    return Post(false, peer, tag, data.data(), data.size());
  }

  absl::StatusOr<int64_t> AllReduceMax(int64_t value, absl::Duration timeout) override {
    const int n = size();
    const uint64_t tag = kControlTag + (control_seq_++);
    int64_t mine = value;
    std::vector<int64_t> theirs(n, value);
    std::vector<std::unique_ptr<PendingOp>> ops;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank()) continue;
      auto s = Post(true, peer, tag, reinterpret_cast<std::byte*>(&mine), sizeof(mine));
      if (!s.ok()) return s.status();
      ops.push_back(std::move(*s));
      auto r = Post(false, peer, tag, reinterpret_cast<std::byte*>(&theirs[peer]), sizeof(int64_t));
      if (!r.ok()) return r.status();
      ops.push_back(std::move(*r));
    }
    for (auto& op : ops) {
      absl::Status s = op->Wait(timeout);
      if (!s.ok()) return s;
    }
    int64_t best = value;
    for (int64_t v : theirs) best = std::max(best, v);
    return best;
  }

  void Abort() override { waits_->AbortAll(); }
  std::vector<int> UnreachablePeers() const override { return waits_->Unreachable(); }

 private:
  absl::StatusOr<std::unique_ptr<PendingOp>> Post(bool send, int peer, uint64_t tag,
                                                  std::byte* data, size_t bytes) {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer ", peer, " is not another rank of ", size()));
    }
    if (waits_->aborted()) return GlooAborted();
    if (bytes == 0) return std::unique_ptr<PendingOp>(new GlooOp(nullptr, send, peer, waits_));
    try {
      std::unique_ptr<gloo::transport::UnboundBuffer> buffer =
          context_->createUnboundBuffer(data, bytes);
      if (send) {
        buffer->send(peer, tag);
      } else {
        buffer->recv(peer, tag);
      }
      return std::unique_ptr<PendingOp>(new GlooOp(std::move(buffer), send, peer, waits_));
    } catch (const std::exception& e) {
      return waits_->Failed(
          peer, FromException(e, absl::StrCat(send ? "send to" : "recv from", " rank ", peer)));
    }
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  absl::Duration timeout_;
  uint64_t control_seq_ = 0;
  std::shared_ptr<PendingWaits> waits_ = std::make_shared<PendingWaits>();
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectGloo(const GlooOptions& options,
                                                       gloo::rendezvous::Store& store) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo rank ", options.rank, " is not within size ", options.size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(Ms(options.connect_timeout / 5));
    context->connectFullMesh(store, device);
    context->setTimeout(Ms(options.timeout));
    return std::unique_ptr<Transport>(new GlooTransport(std::move(context), options.timeout));
  } catch (const std::exception& e) {
    return FromException(
        e, absl::StrCat("gloo rendezvous of rank ", options.rank, " of ", options.size));
  }
}

}  // namespace pipeplan::worker
