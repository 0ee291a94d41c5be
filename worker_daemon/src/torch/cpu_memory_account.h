// The CPU tensor memory one executor holds, measured at the allocator: on
// the CPU LibTorch has no allocator statistics (CUDA has its caching
// allocator's), so the worker installs a counting CPU allocator once per
// process and charges each allocation to the account of the executor whose
// call made it (a thread-local scope around the executor's calls), and each
// free to the account that was charged, whichever thread frees it. So
// several executors in one process (threads of a test) each see their own
// peak, and an executor's peak is its tensors' — parameters, gradients,
// optimizer state, autograd's saved activations, boundary buffers and the
// temporaries of every op — not the Python or library heap beside them.
//
// Private to pipeplan_torch_executor (includes LibTorch).
#ifndef PIPEPLAN_WORKER_SRC_TORCH_CPU_MEMORY_ACCOUNT_H_
#define PIPEPLAN_WORKER_SRC_TORCH_CPU_MEMORY_ACCOUNT_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace pipeplan::worker {

class CpuMemoryAccount : public std::enable_shared_from_this<CpuMemoryAccount> {
 public:
  // A new account; installs the counting allocator on first use.
  static std::shared_ptr<CpuMemoryAccount> Make();

  int64_t current_bytes() const { return current_.load(std::memory_order_relaxed); }
  int64_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  // The peak restarts at what is held now (after loading, which briefly
  // holds every stage's initial parameters).
  void ResetPeak() { peak_.store(current_bytes(), std::memory_order_relaxed); }

  // While alive, CPU allocations of this thread are charged to `account`
  // (nullptr: to none); scopes nest.
  class Scope {
   public:
    explicit Scope(CpuMemoryAccount* account);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CpuMemoryAccount* previous_;
  };

  void Charge(int64_t bytes);
  void Release(int64_t bytes) { current_.fetch_sub(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_TORCH_CPU_MEMORY_ACCOUNT_H_
