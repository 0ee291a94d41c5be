#include "pipeplan/worker/transport/nccl_transport.h"

#include "absl/strings/str_cat.h"

#ifdef PIPEPLAN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <vector>
#endif

namespace pipeplan::worker {

#ifndef PIPEPLAN_HAVE_NCCL

bool NcclAvailable() { return false; }
int CudaDeviceCount() { return 0; }
absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(const NcclOptions&, KeyValue&,
                                                       const std::string&) {
  return absl::UnimplementedError("this build has no NCCL transport (CUDA/NCCL not found)");
}

#else

namespace {

absl::Status CudaError(cudaError_t e, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}
absl::Status NcclError(ncclResult_t r, const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

class NcclOp final : public PendingOp {
 public:
  NcclOp(cudaEvent_t event, void* device_buffer, std::shared_ptr<std::atomic<bool>> aborted)
      : event_(event), device_(device_buffer), aborted_(std::move(aborted)) {}
  ~NcclOp() override {
    if (event_) cudaEventDestroy(event_);
    if (device_) cudaFree(device_);
  }
  absl::Status Wait(absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      if (aborted_->load()) return absl::AbortedError("the NCCL transport was aborted");
      cudaError_t e = cudaEventQuery(event_);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CudaError(e, "waiting for an NCCL transfer");
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("NCCL transfer did not complete within ", absl::FormatDuration(timeout)));
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }

 private:
  cudaEvent_t event_;
  void* device_;
  std::shared_ptr<std::atomic<bool>> aborted_;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(int rank, int size, KeyValue& kv, std::string prefix)
      : rank_(rank), size_(size), kv_(kv), prefix_(std::move(prefix)) {}
  ~NcclTransport() override {
    for (auto& [peer, pair] : pairs_) {
      // After an abort, transfers may still be queued on the communicator:
      // ncclCommDestroy would wait for them, ncclCommAbort does not.
      if (aborted_->load()) {
        ncclCommAbort(pair.comm);
      } else {
        ncclCommDestroy(pair.comm);
      }
      cudaStreamDestroy(pair.stream);
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

  absl::Status Init(absl::Duration timeout) {
    // Every pair in lexicographic order on every rank: no init cycle.
    for (int lo = 0; lo < size_; ++lo) {
      for (int hi = lo + 1; hi < size_; ++hi) {
        if (lo != rank_ && hi != rank_) continue;
        const std::string key = absl::StrCat(prefix_, "nccl/", lo, "-", hi);
        ncclUniqueId id;
        if (rank_ == lo) {
          ncclResult_t r = ncclGetUniqueId(&id);
          if (r != ncclSuccess) return NcclError(r, "ncclGetUniqueId");
          absl::Status s = kv_.Set(key, std::string(reinterpret_cast<const char*>(&id), sizeof id));
          if (!s.ok()) return s;
        } else {
          absl::StatusOr<std::string> v = kv_.WaitGet(key, timeout);
          if (!v.ok()) return v.status();
          if (v->size() != sizeof id) return absl::InternalError("bad ncclUniqueId size");
          std::copy(v->begin(), v->end(), reinterpret_cast<char*>(&id));
        }
        Pair pair;
        cudaError_t e = cudaStreamCreateWithFlags(&pair.stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) return CudaError(e, "cudaStreamCreate");
        ncclResult_t r = ncclCommInitRank(&pair.comm, 2, id, rank_ == lo ? 0 : 1);
        if (r != ncclSuccess) return NcclError(r, "ncclCommInitRank");
        pairs_[rank_ == lo ? hi : lo] = pair;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<PendingOp>> Send(int peer, uint64_t,
                                                  std::span<const std::byte> data) override {
    return Post(true, peer, const_cast<std::byte*>(data.data()), data.size());
  }
  absl::StatusOr<std::unique_ptr<PendingOp>> Recv(int peer, uint64_t,
                                                  std::span<std::byte> data) override {
    return Post(false, peer, data.data(), data.size());
  }

  void Abort() override { aborted_->store(true); }

  absl::StatusOr<int64_t> AllReduceMax(int64_t value, absl::Duration timeout) override {
    const uint64_t seq = agree_seq_++;
    absl::Status s = kv_.Set(absl::StrCat(prefix_, "agree/", seq, "/", rank_), absl::StrCat(value));
    if (!s.ok()) return s;
    int64_t best = value;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      absl::StatusOr<std::string> v =
          kv_.WaitGet(absl::StrCat(prefix_, "agree/", seq, "/", r), timeout, [this] {
            return aborted_->load() ? absl::AbortedError("the NCCL transport was aborted")
                                    : absl::OkStatus();
          });
      if (!v.ok()) return v.status();
      best = std::max<int64_t>(best, std::stoll(*v));
    }
    return best;
  }

 private:
  struct Pair {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };

  absl::StatusOr<std::unique_ptr<PendingOp>> Post(bool send, int peer, std::byte* host,
                                                  size_t bytes) {
    if (aborted_->load()) return absl::AbortedError("the NCCL transport was aborted");
    auto it = pairs_.find(peer);
    if (it == pairs_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no NCCL communicator with rank ", peer));
    }
    Pair& pair = it->second;
    void* device = nullptr;
    cudaError_t e = cudaMalloc(&device, std::max<size_t>(bytes, 1));
    if (e != cudaSuccess) return CudaError(e, "cudaMalloc");
    cudaEvent_t event = nullptr;
    e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      cudaFree(device);
      return CudaError(e, "cudaEventCreate");
    }
    auto op = std::make_unique<NcclOp>(event, device, aborted_);
    const int nccl_peer = peer < rank_ ? 0 : 1;
    if (send) {
      e = cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, pair.stream);
      if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
    }
    ncclGroupStart();
    ncclResult_t r = send ? ncclSend(device, bytes, ncclChar, nccl_peer, pair.comm, pair.stream)
                          : ncclRecv(device, bytes, ncclChar, nccl_peer, pair.comm, pair.stream);
    ncclResult_t g = ncclGroupEnd();
    if (r != ncclSuccess) return NcclError(r, send ? "ncclSend" : "ncclRecv");
    if (g != ncclSuccess) return NcclError(g, "ncclGroupEnd");
    if (!send) {
      e = cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, pair.stream);
      if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
    }
    e = cudaEventRecord(event, pair.stream);
    if (e != cudaSuccess) return CudaError(e, "cudaEventRecord");
    return std::unique_ptr<PendingOp>(std::move(op));
  }

  int rank_;
  int size_;
  KeyValue& kv_;
  std::string prefix_;
  std::map<int, Pair> pairs_;
  uint64_t agree_seq_ = 0;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

bool NcclAvailable() { return true; }

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(const NcclOptions& options, KeyValue& kv,
                                                       const std::string& prefix) {
  if (CudaDeviceCount() == 0) {
    return absl::FailedPreconditionError("--transport nccl needs a CUDA device; none is visible");
  }
  cudaError_t e = cudaSetDevice(options.device_ordinal >= 0 ? options.device_ordinal : 0);
  if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  auto t = std::make_unique<NcclTransport>(options.rank, options.size, kv, prefix);
  absl::Status s = t->Init(options.timeout);
  if (!s.ok()) return s;
  return std::unique_ptr<Transport>(std::move(t));
}

#endif  // PIPEPLAN_HAVE_NCCL

}  // namespace pipeplan::worker
