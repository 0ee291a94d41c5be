#include "pipeplan/worker/gloo_transport.h"

#include <chrono>
#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
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

class GlooOp final : public PendingOp {
 public:
  GlooOp(std::unique_ptr<gloo::transport::UnboundBuffer> buffer, bool send, int peer)
      : buffer_(std::move(buffer)), send_(send), peer_(peer) {}
  absl::Status Wait(absl::Duration timeout) override {
    if (!buffer_) return absl::OkStatus();
    try {
      const bool done = send_ ? buffer_->waitSend(Ms(timeout)) : buffer_->waitRecv(Ms(timeout));
      if (!done) return absl::AbortedError("gloo operation aborted");
    } catch (const std::exception& e) {
      return FromException(e, absl::StrCat(send_ ? "send to" : "recv from", " rank ", peer_));
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  bool send_;
  int peer_;
};

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

 private:
  absl::StatusOr<std::unique_ptr<PendingOp>> Post(bool send, int peer, uint64_t tag,
                                                  std::byte* data, size_t bytes) {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer ", peer, " is not another rank of ", size()));
    }
    if (bytes == 0) return std::unique_ptr<PendingOp>(new GlooOp(nullptr, send, peer));
    try {
      std::unique_ptr<gloo::transport::UnboundBuffer> buffer =
          context_->createUnboundBuffer(data, bytes);
      if (send) {
        buffer->send(peer, tag);
      } else {
        buffer->recv(peer, tag);
      }
      return std::unique_ptr<PendingOp>(new GlooOp(std::move(buffer), send, peer));
    } catch (const std::exception& e) {
      return FromException(e, absl::StrCat(send ? "send to" : "recv from", " rank ", peer));
    }
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  absl::Duration timeout_;
  uint64_t control_seq_ = 0;
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
