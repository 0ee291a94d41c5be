// The counting CPU allocator behind CpuMemoryAccount. Its DataPtr's context
// is the data pointer itself (as LibTorch's default CPU allocator's), so
// raw_allocate/raw_deleter keep working; the bytes and the account of each
// charged allocation sit in a table under one mutex.
#include "cpu_memory_account.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace pipeplan::worker {
namespace {

thread_local CpuMemoryAccount* current_account = nullptr;

struct Charged {
  int64_t bytes;
  std::shared_ptr<CpuMemoryAccount> account;
};

std::mutex& TableMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

std::unordered_map<void*, Charged>& Table() {
  static auto* table = new std::unordered_map<void*, Charged>();
  return *table;
}

void Free(void* data) {
  if (data == nullptr) return;
  std::shared_ptr<CpuMemoryAccount> account;
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> l(TableMutex());
    auto it = Table().find(data);
    if (it != Table().end()) {
      bytes = it->second.bytes;
      account = std::move(it->second.account);
      Table().erase(it);
    }
  }
  if (account) account->Release(bytes);
  c10::free_cpu(data);
}

// LibTorch 2.3 made Allocator::allocate non-const and added copy_data (a
// CUDA wheel is 2.x, Debian's libtorch-dev 1.13).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define PIPEPLAN_ALLOCATE_CONST
#define PIPEPLAN_ALLOCATOR_COPY_DATA 1
#else
#define PIPEPLAN_ALLOCATE_CONST const
#endif

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) PIPEPLAN_ALLOCATE_CONST override {
    void* data = c10::alloc_cpu(n);
    if (CpuMemoryAccount* account = current_account; account != nullptr && data != nullptr) {
      // An allocation keeps its account alive until it is freed.
      std::shared_ptr<CpuMemoryAccount> shared = account->weak_from_this().lock();
      if (shared) {
        {
          std::lock_guard<std::mutex> l(TableMutex());
          Table()[data] = Charged{static_cast<int64_t>(n), std::move(shared)};
        }
        account->Charge(static_cast<int64_t>(n));
      }
    }
    return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }
#ifdef PIPEPLAN_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
#endif
};

}  // namespace

std::shared_ptr<CpuMemoryAccount> CpuMemoryAccount::Make() {
  // Installed once and never removed: tensors allocated by it may outlive
  // every account. Priority 1 wins over LibTorch's default (0).
  static CountingAllocator* allocator = [] {
    auto* a = new CountingAllocator();
    c10::SetCPUAllocator(a, /*priority=*/1);
    return a;
  }();
  (void)allocator;
  return std::make_shared<CpuMemoryAccount>();
}

void CpuMemoryAccount::Charge(int64_t bytes) {
  const int64_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

CpuMemoryAccount::Scope::Scope(CpuMemoryAccount* account) : previous_(current_account) {
  current_account = account;
}
CpuMemoryAccount::Scope::~Scope() { current_account = previous_; }

}  // namespace pipeplan::worker
