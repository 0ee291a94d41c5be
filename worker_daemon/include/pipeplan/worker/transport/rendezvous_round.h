// Rounds of a plan version's rendezvous. Every attempt to connect a
// version's transport meets in a namespace of its own, opened by world rank
// 0 and joined by the others, so no attempt can read an address an earlier
// attempt (or an earlier run of a restarted worker) left in the key-value
// space. Reading such an address made two restarted Gloo ranks both take the
// listening side of their pair and wait for each other until Gloo's connect
// timeout (five times its pair timeout) ran out. Used by the control
// plane's switches; docs/elastic.md describes the protocol.
#ifndef PIPEPLAN_WORKER_SRC_RENDEZVOUS_ROUND_H_
#define PIPEPLAN_WORKER_SRC_RENDEZVOUS_ROUND_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/worker/transport/gloo_transport.h"
#include "pipeplan/worker/transport/rendezvous.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct RoundMember {
  // Keys live under `base` (e.g. "v3/gloo/").
  std::string base;
  int rank = 0;
  int size = 1;
  // This process's run id; published under base + "nonce/<rank>".
  std::string nonce;
  // How long opening or joining a round waits for the others' keys.
  absl::Duration timeout = absl::Seconds(60);
  // Asked between polls of every wait and before every round; a non-OK
  // answer ends the connect with it. The control plane answers ABORTED once
  // a newer plan version is known: the peers this version waits for may
  // never come (a lost worker the newer version leaves out), and waiting
  // out `timeout` stalled the survivors of a loss for 30-90 s (issue 26).
  std::function<absl::Status()> abandon;
};

class RendezvousRound {
 public:
  // Publishes the member's nonce (idempotent).
  static absl::Status Announce(KeyValue& kv, const RoundMember& m);

  // Rank 0 reads every rank's nonce and opens a fresh round with them. Any
  // other rank waits until rank 0 opened a round that names its nonce and
  // is not `last_tried` (the id of the round this process already failed
  // in). DEADLINE_EXCEEDED after `m.timeout`.
  static absl::StatusOr<RendezvousRound> Next(KeyValue& kv, const RoundMember& m,
                                              const std::string& last_tried);

  const std::string& id() const { return id_; }
  // Where the round's keys live.
  std::string prefix() const;

  // OK while waiting for `peer`'s keys can still succeed; UNAVAILABLE (so the
  // caller retries with the next round) once `peer` runs as a process other
  // than the one the round was opened for, rank 0 opened a newer round, or
  // the round's keys are gone (a planner restart lost them). Lookup errors
  // count as "still current": the wait's own timeout decides.
  absl::Status StillCurrent(KeyValue& kv, int peer) const;

  // The member's abandon answer (OK when it has none).
  absl::Status Abandoned() const { return member_.abandon ? member_.abandon() : absl::OkStatus(); }
  // The same round without the member's abandon: for a connect thread
  // that may outlive what the abandon answer reads (connect_watchdog.h).
  RendezvousRound Detached() const {
    RendezvousRound out = *this;
    out.member_.abandon = nullptr;
    return out;
  }

 private:
  RendezvousRound(RoundMember member, std::string id, std::vector<std::string> nonces)
      : member_(std::move(member)), id_(std::move(id)), nonces_(std::move(nonces)) {}

  RoundMember member_;
  std::string id_;
  std::vector<std::string> nonces_;
};

using RoundAttempt =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(const RendezvousRound&)>;

// Announces `m` and runs `attempt` in successive rounds until it connects,
// fails with a non-retryable error, `m.abandon` says to stop (its status),
// or `deadline` passes (its last error).
// A round this process already used for `m.base` (an earlier build of the
// same version) is never joined again.
absl::StatusOr<std::unique_ptr<Transport>> ConnectInRounds(KeyValue& kv, const RoundMember& m,
                                                           absl::Time deadline,
                                                           const RoundAttempt& attempt);

// One Gloo attempt in `round`: a wait for a peer's keys ends as soon as
// the round can no longer complete (RendezvousRound::StillCurrent). The
// attempt runs under a watchdog (connect_watchdog.h): after `timeout`, or
// once the member abandons the version, it is given up even when Gloo is
// blocked connecting a pair, and its thread is left behind.
absl::StatusOr<std::unique_ptr<Transport>> ConnectGlooInRound(KeyValue& kv,
                                                              const RendezvousRound& round,
                                                              const GlooOptions& options,
                                                              absl::Duration timeout);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_RENDEZVOUS_ROUND_H_
