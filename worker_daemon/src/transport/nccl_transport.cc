#include "pipeplan/worker/transport/nccl_transport.h"

#include "absl/strings/str_cat.h"

#ifdef PIPEPLAN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "pipeplan/common/status_macros.h"
#endif

namespace pipeplan::worker {

#ifndef PIPEPLAN_HAVE_NCCL

bool NcclAvailable() { return false; }
int CudaDeviceCount() { return 0; }
absl::StatusOr<std::string> CudaDeviceUuid(int) {
  return absl::UnimplementedError("this build has no CUDA runtime (CUDA/NCCL not found)");
}
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

// Device buffers for host-memory messages, reused by size (a pipeline sends
// the same few sizes every step), so a message costs no cudaMalloc after the
// first step. Events likewise. Shared with the ops, which give theirs back.
class CudaPool {
 public:
  ~CudaPool() {
    for (auto& [bytes, list] : buffers_) {
      for (void* p : list) cudaFree(p);
    }
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  absl::StatusOr<void*> TakeBuffer(size_t bytes) {
    {
      absl::MutexLock lock(&mu_);
      auto it = buffers_.find(bytes);
      if (it != buffers_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (e != cudaSuccess) return CudaError(e, absl::StrCat("cudaMalloc of ", bytes, " bytes"));
    return p;
  }
  void GiveBuffer(size_t bytes, void* p) {
    absl::MutexLock lock(&mu_);
    buffers_[bytes].push_back(p);
  }
  absl::StatusOr<cudaEvent_t> TakeEvent() {
    {
      absl::MutexLock lock(&mu_);
      if (!events_.empty()) {
        cudaEvent_t e = events_.back();
        events_.pop_back();
        return e;
      }
    }
    cudaEvent_t event = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e != cudaSuccess) return CudaError(e, "cudaEventCreate");
    return event;
  }
  void GiveEvent(cudaEvent_t e) {
    absl::MutexLock lock(&mu_);
    events_.push_back(e);
  }

 private:
  absl::Mutex mu_;
  std::map<size_t, std::vector<void*>> buffers_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaEvent_t> events_ ABSL_GUARDED_BY(mu_);
};

// One posted transfer: done when its event (recorded on the pair's stream
// after the transfer and, for a staged recv, the copy back) has fired.
class NcclOp final : public PendingOp {
 public:
  NcclOp(std::shared_ptr<CudaPool> pool, std::shared_ptr<std::atomic<bool>> aborted)
      : pool_(std::move(pool)), aborted_(std::move(aborted)) {}
  ~NcclOp() override {
    // A transfer still queued (an abort, a failed post) may yet touch the
    // staging buffer: only a completed op returns it to the pool.
    const bool done = event_ != nullptr && cudaEventQuery(event_) == cudaSuccess;
    if (event_ != nullptr && done) pool_->GiveEvent(event_);
    if (staging_ != nullptr && done) pool_->GiveBuffer(staging_bytes_, staging_);
  }
  void set_event(cudaEvent_t e) { event_ = e; }
  void set_staging(void* p, size_t bytes) {
    staging_ = p;
    staging_bytes_ = bytes;
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
  std::shared_ptr<CudaPool> pool_;
  std::shared_ptr<std::atomic<bool>> aborted_;
  cudaEvent_t event_ = nullptr;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(int rank, int size, int ordinal, KeyValue& kv, std::string prefix)
      : rank_(rank), size_(size), ordinal_(ordinal), kv_(kv), prefix_(std::move(prefix)) {}
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
  bool TakesDeviceBuffers() const override { return true; }

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
        pair.nccl_peer = rank_ == lo ? 1 : 0;
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
    int nccl_peer = 0;  // the other end's rank in the 2-rank communicator
  };

  // Where `data` lives: true for device (or managed) memory of this
  // transport's GPU, false for host memory; INVALID_ARGUMENT for another
  // GPU's memory.
  absl::StatusOr<bool> OnDevice(const void* data) const {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, data) != cudaSuccess) {
      cudaGetLastError();  // older runtimes fail on pageable memory: host
      return false;
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return false;
    if (attr.device != ordinal_) {
      return absl::InvalidArgumentError(absl::StrCat("a buffer on CUDA device ", attr.device,
                                                     " given to the NCCL transport of device ",
                                                     ordinal_));
    }
    return true;
  }

  // Posts the transfer on the pair's stream. Device buffers go as they are;
  // host buffers through a pooled device buffer. The stream first waits for
  // the work queued so far on the compute stream (torch's default stream),
  // so a device tensor is sent only after the kernels that wrote it.
  absl::StatusOr<std::unique_ptr<PendingOp>> Post(bool send, int peer, std::byte* data,
                                                  size_t bytes) {
    if (aborted_->load()) return absl::AbortedError("the NCCL transport was aborted");
    auto it = pairs_.find(peer);
    if (it == pairs_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no NCCL communicator with rank ", peer));
    }
    Pair& pair = it->second;
    PIPEPLAN_ASSIGN_OR_RETURN(const bool on_device, OnDevice(data));
    auto op = std::make_unique<NcclOp>(pool_, aborted_);
    void* buffer = data;
    if (!on_device) {
      PIPEPLAN_ASSIGN_OR_RETURN(buffer, pool_->TakeBuffer(bytes));
      op->set_staging(buffer, bytes);
    }
    PIPEPLAN_RETURN_IF_ERROR(AfterCompute(pair.stream));
    if (send && !on_device) {
      cudaError_t e = cudaMemcpyAsync(buffer, data, bytes, cudaMemcpyHostToDevice, pair.stream);
      if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
    }
    ncclGroupStart();
    ncclResult_t r =
        send ? ncclSend(buffer, bytes, ncclChar, pair.nccl_peer, pair.comm, pair.stream)
             : ncclRecv(buffer, bytes, ncclChar, pair.nccl_peer, pair.comm, pair.stream);
    ncclResult_t g = ncclGroupEnd();
    if (r != ncclSuccess) return NcclError(r, send ? "ncclSend" : "ncclRecv");
    if (g != ncclSuccess) return NcclError(g, "ncclGroupEnd");
    if (!send && !on_device) {
      cudaError_t e = cudaMemcpyAsync(data, buffer, bytes, cudaMemcpyDeviceToHost, pair.stream);
      if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync");
    }
    PIPEPLAN_ASSIGN_OR_RETURN(cudaEvent_t done, pool_->TakeEvent());
    op->set_event(done);
    cudaError_t e = cudaEventRecord(done, pair.stream);
    if (e != cudaSuccess) return CudaError(e, "cudaEventRecord");
    return std::unique_ptr<PendingOp>(std::move(op));
  }

  // Makes `stream` wait for what the compute stream has queued so far.
  absl::Status AfterCompute(cudaStream_t stream) {
    PIPEPLAN_ASSIGN_OR_RETURN(cudaEvent_t computed, pool_->TakeEvent());
    cudaError_t e = cudaEventRecord(computed, cudaStreamLegacy);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, computed, 0);
    // The wait is captured when enqueued: the event may be reused at once.
    pool_->GiveEvent(computed);
    return e == cudaSuccess ? absl::OkStatus() : CudaError(e, "ordering after compute");
  }

  int rank_;
  int size_;
  int ordinal_;
  KeyValue& kv_;
  std::string prefix_;
  std::map<int, Pair> pairs_;
  uint64_t agree_seq_ = 0;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<CudaPool> pool_ = std::make_shared<CudaPool>();
};

}  // namespace

bool NcclAvailable() { return true; }

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

absl::StatusOr<std::string> CudaDeviceUuid(int ordinal) {
  cudaDeviceProp prop{};
  cudaError_t e = cudaGetDeviceProperties(&prop, ordinal);
  if (e != cudaSuccess) {
    return CudaError(e, absl::StrCat("cudaGetDeviceProperties(", ordinal, ")"));
  }
  std::string uuid;
  for (char c : prop.uuid.bytes)
    absl::StrAppend(&uuid, absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
  return uuid;
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectNccl(const NcclOptions& options, KeyValue& kv,
                                                       const std::string& prefix) {
  if (CudaDeviceCount() == 0) {
    return absl::FailedPreconditionError("--transport nccl needs a CUDA device; none is visible");
  }
  const int ordinal = options.device_ordinal >= 0 ? options.device_ordinal : 0;
  cudaError_t e = cudaSetDevice(ordinal);
  if (e != cudaSuccess) return CudaError(e, absl::StrCat("cudaSetDevice(", ordinal, ")"));
  auto t = std::make_unique<NcclTransport>(options.rank, options.size, ordinal, kv, prefix);
  absl::Status s = t->Init(options.timeout);
  if (!s.ok()) return s;
  return std::unique_ptr<Transport>(std::move(t));
}

#endif  // PIPEPLAN_HAVE_NCCL

}  // namespace pipeplan::worker
