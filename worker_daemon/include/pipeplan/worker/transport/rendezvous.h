// Rendezvous through the planner: a key-value space per job (the planner's
// RendezvousSet/RendezvousGet RPCs; PlannerKeyValue in src/control) and a
// Gloo store over it, so workers of
// one job and plan version find each other with nothing but the planner's
// address. Keys are prefixed with the plan version ("v3/gloo/..."), so each
// plan version gets a fresh round.
#ifndef PIPEPLAN_WORKER_RENDEZVOUS_H_
#define PIPEPLAN_WORKER_RENDEZVOUS_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"

namespace pipeplan::worker {

class KeyValue {
 public:
  virtual ~KeyValue() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // std::nullopt while the key is not set.
  virtual absl::StatusOr<std::optional<std::string>> Get(const std::string& key) = 0;

  // Polls Get until the key is set: DEADLINE_EXCEEDED after `timeout`;
  // transport errors (UNAVAILABLE while the planner restarts) are retried.
  // `give_up`, when set, is asked between polls: a non-OK answer ends the
  // wait with that status (the key can no longer come).
  absl::StatusOr<std::string> WaitGet(const std::string& key, absl::Duration timeout,
                                      const std::function<absl::Status()>& give_up = nullptr);
};

// gloo::rendezvous::Store over a KeyValue with a key prefix. Gloo's store API
// throws: errors and timeouts become gloo::IoException. Every wait lasts up
// to `timeout` (Gloo's own timeout argument is its pair timeout, not a
// rendezvous bound). `give_up`, when set, is asked between polls with the
// Gloo key being waited for ("3" or "rank_3": rank 3's keys) and ends the
// wait with its non-OK status.
class GlooKeyValueStore final : public gloo::rendezvous::Store {
 public:
  using GiveUp = std::function<absl::Status(const std::string& key)>;
  GlooKeyValueStore(KeyValue* kv, std::string prefix, absl::Duration timeout,
                    GiveUp give_up = nullptr)
      : kv_(kv), prefix_(std::move(prefix)), timeout_(timeout), give_up_(std::move(give_up)) {}
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  absl::StatusOr<std::string> Wait(const std::string& key);

  KeyValue* kv_;
  std::string prefix_;
  absl::Duration timeout_;
  GiveUp give_up_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_RENDEZVOUS_H_
