// ThreadSanitizer annotations for an Abseil that was not built with it.
//
// Debian's libabsl_synchronization is not instrumented: absl::Mutex locks
// and unlocks with atomics and futexes that ThreadSanitizer never sees, so
// it finds no happens-before edge between two critical sections of the same
// mutex and reports races on correctly locked data. Abseil built with TSan
// tells the runtime about each lock through the __tsan_mutex_* interface;
// this library does the same from outside. It defines the public
// synchronization entry points of absl::Mutex, absl::CondVar and
// absl::Notification (and absl::Status's out-of-line release of its shared
// message, below), so that the dynamic linker binds every caller (ours,
// gRPC's, Abseil's own cross-object calls) to these definitions; each one
// tells the runtime what the call does to the mutex and forwards to
// Abseil's definition, found with dlsym(RTLD_NEXT).
//
// Built only for -DPIPEPLAN_SANITIZE=thread (CMakeLists.txt links it into
// every target ahead of Abseil). A symbol that cannot be found aborts the
// process: a TSan run without these annotations would report false races,
// and a run that silently lost some would hide real ones.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#if !ABSL_OPTION_USE_INLINE_NAMESPACE
#error "tsan_absl_sync.cc spells Abseil's mangled names with its inline namespace"
#endif

namespace {

#define PIPEPLAN_TSAN_STR2(x) #x
#define PIPEPLAN_TSAN_STR(x) PIPEPLAN_TSAN_STR2(x)

// Abseil's definition of `_ZN4absl<ns><rest>`: <rest> is the mangled name
// after the inline namespace (whose length and name this build's headers
// give), so one source serves every Abseil release.
template <typename Fn>
Fn Real(const char* rest, const char* is_const = "") {
  const std::string ns = PIPEPLAN_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name =
      std::string("_ZN") + is_const + "4absl" + std::to_string(ns.size()) + ns + rest;
  void* symbol = dlsym(RTLD_NEXT, name.c_str());
  if (symbol == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found after this library: %s\n", name.c_str(),
                 dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(symbol);
}

using MutexFn = void (*)(absl::Mutex*);
using TryFn = bool (*)(absl::Mutex*);
using AwaitFn = void (*)(absl::Mutex*, const absl::Condition&);
using AwaitTimeoutFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Duration);
using AwaitDeadlineFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Time);

constexpr unsigned kRead = __tsan_mutex_read_lock;

// Abseil's entry points call each other (AwaitWithTimeout calls
// AwaitWithDeadline, Notify locks its mutex, ...), and those calls bind
// here too. Only the outermost call of a thread is annotated: it describes
// the whole operation, and a nested one would record its unlock twice.
thread_local int depth = 0;

// Runs `call` inside the outermost entry point, or alone when nested.
template <typename Call, typename Before, typename After>
auto Outermost(Call call, Before before, After after) {
  if (depth > 0) return call();
  ++depth;
  before();
  auto result = call();
  after(result);
  --depth;
  return result;
}

// A call that leaves the mutex held (Lock, LockWhen...): the acquire is
// recorded after Abseil returns, when this thread really holds it.
template <typename Call>
auto Acquiring(absl::Mutex* mu, unsigned flags, Call call) {
  return Outermost(
      call, [&] { __tsan_mutex_pre_lock(mu, flags); },
      [&](auto) { __tsan_mutex_post_lock(mu, flags, 0); });
}

// A call made with the mutex held that releases it, waits, and takes it
// again before returning (Await, CondVar::Wait): a release, then an
// acquire. Abseil evaluates the condition inside, ignored by the runtime in
// between; the caller's code around the call is checked as usual.
template <typename Call>
auto Waiting(absl::Mutex* mu, unsigned flags, Call call) {
  return Outermost(
      call, [&] { __tsan_mutex_pre_unlock(mu, flags); },
      [&](auto) {
        __tsan_mutex_post_unlock(mu, flags);
        __tsan_mutex_pre_lock(mu, flags);
        __tsan_mutex_post_lock(mu, flags, 0);
      });
}

void Unlocking(absl::Mutex* mu, unsigned flags, MutexFn real) {
  Outermost([&] { return (real(mu), 0); }, [&] { __tsan_mutex_pre_unlock(mu, flags); },
            [&](auto) { __tsan_mutex_post_unlock(mu, flags); });
}

bool Trying(absl::Mutex* mu, unsigned flags, TryFn real) {
  const unsigned tried = flags | __tsan_mutex_try_lock;
  return Outermost([&] { return real(mu); }, [&] { __tsan_mutex_pre_lock(mu, tried); },
                   [&](bool locked) {
                     __tsan_mutex_post_lock(
                         mu, locked ? tried : tried | __tsan_mutex_try_lock_failed, 0);
                   });
}

// The release before a notification and the acquire after seeing one go on
// the Notification itself.
template <typename Call>
auto Notifying(const absl::Notification* n, Call call) {
  auto* addr = const_cast<absl::Notification*>(n);
  return Outermost(
      call, [&] { __tsan_release(addr); }, [](auto) {});
}

template <typename Call>
auto AwaitingNotification(const absl::Notification* n, Call call) {
  auto* addr = const_cast<absl::Notification*>(n);
  return Outermost(
      call, [] {},
      [&](bool notified) {
        if (notified) __tsan_acquire(addr);
      });
}

}  // namespace

namespace absl {

void Mutex::Lock() {
  static const auto real = Real<MutexFn>("5Mutex4LockEv");
  Acquiring(this, 0, [&] { return (real(this), 0); });
}

void Mutex::ReaderLock() {
  static const auto real = Real<MutexFn>("5Mutex10ReaderLockEv");
  Acquiring(this, kRead, [&] { return (real(this), 0); });
}

void Mutex::Unlock() {
  static const auto real = Real<MutexFn>("5Mutex6UnlockEv");
  Unlocking(this, 0, real);
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<MutexFn>("5Mutex12ReaderUnlockEv");
  Unlocking(this, kRead, real);
}

bool Mutex::TryLock() {
  static const auto real = Real<TryFn>("5Mutex7TryLockEv");
  return Trying(this, 0, real);
}

bool Mutex::ReaderTryLock() {
  static const auto real = Real<TryFn>("5Mutex13ReaderTryLockEv");
  return Trying(this, kRead, real);
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real = Real<AwaitFn>("5Mutex8LockWhenERKNS0_9ConditionE");
  Acquiring(this, 0, [&] { return (real(this, cond), 0); });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static const auto real = Real<AwaitFn>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Acquiring(this, kRead, [&] { return (real(this, cond), 0); });
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real =
      Real<AwaitTimeoutFn>("5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Acquiring(this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real =
      Real<AwaitDeadlineFn>("5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Acquiring(this, 0, [&] { return real(this, cond, deadline); });
}

void Mutex::Await(const Condition& cond) {
  static const auto real = Real<AwaitFn>("5Mutex5AwaitERKNS0_9ConditionE");
  Waiting(this, 0, [&] { return (real(this, cond), 0); });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real =
      Real<AwaitTimeoutFn>("5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Waiting(this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto real =
      Real<AwaitDeadlineFn>("5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Waiting(this, 0, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  static const auto real = Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Waiting(mu, 0, [&] { return (real(this, mu), 0); });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return Waiting(mu, 0, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real =
      Real<bool (*)(CondVar*, Mutex*, Time)>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return Waiting(mu, 0, [&] { return real(this, mu, deadline); });
}

void Notification::Notify() {
  static const auto real = Real<void (*)(Notification*)>("12Notification6NotifyEv");
  Notifying(this, [&] { return (real(this), 0); });
}

void Notification::WaitForNotification() const {
  static const auto real =
      Real<void (*)(const Notification*)>("12Notification19WaitForNotificationEv", "K");
  AwaitingNotification(this, [&] { return (real(this), true); });
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static const auto real = Real<bool (*)(const Notification*, Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", "K");
  return AwaitingNotification(this, [&] { return real(this, timeout); });
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  static const auto real = Real<bool (*)(const Notification*, Time)>(
      "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", "K");
  return AwaitingNotification(this, [&] { return real(this, deadline); });
}

// absl::Status shares its message between copies with a reference count
// that libabsl_status drops out of line, unseen: the thread that drops the
// last reference frees the message another thread read, and TSan reported
// that as a race (a handler's answer read by the test while the solver
// thread destroyed its callback). This is the same count, decremented where
// TSan sees the acquire and release (Abseil's own status.cc does exactly
// this; the count's increment is inline in status.h, so it is seen).
void Status::UnrefNonInlined(uintptr_t rep) {
  status_internal::StatusRep* r = RepToPointer(rep);
  if (r->ref.load(std::memory_order_acquire) == 1 ||
      r->ref.fetch_sub(1, std::memory_order_acq_rel) - 1 == 0) {
    delete r;
  }
}

}  // namespace absl
