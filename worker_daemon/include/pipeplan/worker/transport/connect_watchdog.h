// A watchdog around one connect attempt. Gloo's connectFullMesh can block in
// Pair::connect for minutes after a peer restarted (its own timeouts do not
// end it, issue 26), and a thread blocked there cannot be interrupted. So
// the attempt runs on a thread of its own; the caller waits for it only
// until the round's deadline or until it must give up (a newer plan
// version), then leaves the thread behind and tries the next round. What a
// thread left behind still reaches of the caller's key-value space goes
// through a ClosableKeyValue the watchdog closes as it leaves.
#ifndef PIPEPLAN_WORKER_TRANSPORT_CONNECT_WATCHDOG_H_
#define PIPEPLAN_WORKER_TRANSPORT_CONNECT_WATCHDOG_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/worker/transport/rendezvous.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

// Forwards to `kv` until Close; from then on every call fails with ABORTED
// and `kv` is never touched again (it may be gone).
class ClosableKeyValue final : public KeyValue {
 public:
  explicit ClosableKeyValue(KeyValue* kv) : kv_(kv) {}
  absl::Status Set(const std::string& key, const std::string& value) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for a call in progress to return.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  KeyValue* kv_ ABSL_GUARDED_BY(mu_);
};

using ConnectFn = std::function<absl::StatusOr<std::unique_ptr<Transport>>()>;

// Runs `connect` on a new thread. Returns its result when it ends before
// `deadline`; DEADLINE_EXCEEDED (retryable: the next round) once `deadline`
// passes, or `give_up`'s status once it answers non-OK (asked every 50 ms).
// On those two `on_leave` runs before returning, and the thread is left
// behind: a transport it connects later is dropped. `connect` and `on_leave`
// must own (or share) everything they use.
absl::StatusOr<std::unique_ptr<Transport>> ConnectWithWatchdog(
    ConnectFn connect, absl::Time deadline, const std::function<absl::Status()>& give_up,
    const std::function<void()>& on_leave);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_TRANSPORT_CONNECT_WATCHDOG_H_
