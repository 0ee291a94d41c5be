#include "pipeplan/worker/transport/rendezvous_round.h"

#include <algorithm>
#include <optional>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "pipeplan/common/retry_policy.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/transport/connect_watchdog.h"

namespace pipeplan::worker {
namespace {

std::string NonceKey(const RoundMember& m, int rank) {
  return absl::StrCat(m.base, "nonce/", rank);
}
std::string RoundKey(const RoundMember& m) { return absl::StrCat(m.base, "round"); }

std::string FreshId() {
  std::random_device rd;
  return absl::StrCat(absl::Hex((uint64_t{rd()} << 32) ^ rd() ^ absl::ToUnixNanos(absl::Now())));
}

// The round record rank 0 writes: "<id>;<nonce of rank 0>,<nonce of rank 1>,...".
std::string Encode(const std::string& id, const std::vector<std::string>& nonces) {
  return absl::StrCat(id, ";", absl::StrJoin(nonces, ","));
}

struct Record {
  std::string id;
  std::vector<std::string> nonces;
};

std::optional<Record> Decode(const std::string& value, int size) {
  std::vector<std::string> parts = absl::StrSplit(value, absl::MaxSplits(';', 1));
  if (parts.size() != 2 || parts[0].empty()) return std::nullopt;
  Record r{.id = parts[0], .nonces = absl::StrSplit(parts[1], ',')};
  if (static_cast<int>(r.nonces.size()) != size) return std::nullopt;
  return r;
}

// The Gloo key a connect waits for names the rank whose keys they are:
// "3" (its addresses) or "rank_3" (its host name).
int PeerOfGlooKey(const std::string& key) {
  int peer = -1;
  absl::string_view digits = key;
  if (absl::StartsWith(digits, "rank_")) digits.remove_prefix(5);
  return absl::SimpleAtoi(digits, &peer) ? peer : -1;
}

// The last round this process used per (base, rank): a worker that rebuilds
// a version after a peer failure must not rejoin the round its old transport
// came from. Keyed by rank too so ranks sharing a process (tests) stay apart.
class UsedRounds {
 public:
  std::string Last(const RoundMember& m) {
    absl::MutexLock l(&mu_);
    auto it = last_.find(Key(m));
    return it == last_.end() ? "" : it->second;
  }
  void Use(const RoundMember& m, const std::string& id) {
    absl::MutexLock l(&mu_);
    last_[Key(m)] = id;
  }

 private:
  static std::string Key(const RoundMember& m) { return absl::StrCat(m.base, "#", m.rank); }

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> last_ ABSL_GUARDED_BY(mu_);
};

UsedRounds& Used() {
  static UsedRounds* used = new UsedRounds;
  return *used;
}

}  // namespace

absl::Status RendezvousRound::Announce(KeyValue& kv, const RoundMember& m) {
  return kv.Set(NonceKey(m, m.rank), m.nonce);
}

absl::StatusOr<RendezvousRound> RendezvousRound::Next(KeyValue& kv, const RoundMember& m,
                                                      const std::string& last_tried) {
  if (m.rank == 0) {
    std::vector<std::string> nonces;
    for (int r = 0; r < m.size; ++r) {
      PIPEPLAN_ASSIGN_OR_RETURN(std::string nonce,
                                kv.WaitGet(NonceKey(m, r), m.timeout, m.abandon));
      nonces.push_back(std::move(nonce));
    }
    std::string id = FreshId();
    PIPEPLAN_RETURN_IF_ERROR(kv.Set(RoundKey(m), Encode(id, nonces)));
    return RendezvousRound(m, std::move(id), std::move(nonces));
  }
  const absl::Time deadline = absl::Now() + m.timeout;
  common::Backoff backoff(common::RetryPolicy{absl::Milliseconds(5), absl::Milliseconds(100), 2.0});
  while (true) {
    // WaitGet retries what the planner cannot answer right now.
    absl::StatusOr<std::string> value =
        kv.WaitGet(RoundKey(m), std::max(deadline - absl::Now(), absl::Milliseconds(1)), m.abandon);
    if (!value.ok()) return value.status();
    std::optional<Record> r = Decode(*value, m.size);
    if (r && r->id != last_tried && r->nonces[m.rank] == m.nonce) {
      return RendezvousRound(m, std::move(r->id), std::move(r->nonces));
    }
    if (absl::Now() + backoff.Peek() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank 0 opened no new rendezvous round under \"", m.base, "\" within ",
                       absl::FormatDuration(m.timeout)));
    }
    absl::SleepFor(backoff.Next());
  }
}

std::string RendezvousRound::prefix() const {
  return absl::StrCat(member_.base, "round/", id_, "/");
}

absl::Status RendezvousRound::StillCurrent(KeyValue& kv, int peer) const {
  if (member_.abandon) PIPEPLAN_RETURN_IF_ERROR(member_.abandon());
  if (peer >= 0 && peer < static_cast<int>(nonces_.size()) && peer != member_.rank) {
    // An absent nonce says nothing: a restarted planner lost it, and the
    // peer announces itself again only when it starts a round.
    absl::StatusOr<std::optional<std::string>> nonce = kv.Get(NonceKey(member_, peer));
    if (nonce.ok() && nonce->has_value() && **nonce != nonces_[peer]) {
      return absl::UnavailableError(
          absl::StrCat("rank ", peer, " restarted after rendezvous round ", id_, " opened"));
    }
  }
  absl::StatusOr<std::optional<std::string>> round = kv.Get(RoundKey(member_));
  if (!round.ok()) return absl::OkStatus();
  if (!round->has_value()) {
    return absl::UnavailableError(
        absl::StrCat("the keys of rendezvous round ", id_, " are gone (the planner restarted)"));
  }
  std::optional<Record> r = Decode(**round, member_.size);
  if (r && r->id != id_) {
    return absl::UnavailableError(
        absl::StrCat("rank 0 replaced rendezvous round ", id_, " with ", r->id));
  }
  return absl::OkStatus();
}

}  // namespace pipeplan::worker

namespace pipeplan::worker {

absl::StatusOr<std::unique_ptr<Transport>> ConnectInRounds(KeyValue& kv, const RoundMember& m,
                                                           absl::Time deadline,
                                                           const RoundAttempt& attempt) {
  while (true) {
    if (m.abandon) PIPEPLAN_RETURN_IF_ERROR(m.abandon());
    // Again every round: a restarted planner lost the keys of the last one.
    if (absl::Status s = RendezvousRound::Announce(kv, m); !s.ok()) {
      if (!common::IsRetryable(s) || absl::Now() > deadline) return s;
      continue;
    }
    absl::StatusOr<RendezvousRound> round = RendezvousRound::Next(kv, m, Used().Last(m));
    if (!round.ok()) {
      if (!common::IsRetryable(round.status()) || absl::Now() > deadline) return round.status();
      continue;
    }
    Used().Use(m, round->id());
    absl::StatusOr<std::unique_ptr<Transport>> t = attempt(*round);
    if (t.ok() || !common::IsRetryable(t.status()) || absl::Now() > deadline) return t;
  }
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectGlooInRound(KeyValue& kv,
                                                              const RendezvousRound& round,
                                                              const GlooOptions& options,
                                                              absl::Duration timeout) {
  // The connect thread may be left behind: it reaches `kv` only through
  // `guarded`, closed as the watchdog leaves, and its round has no abandon
  // answer (which reads the caller's state).
  auto guarded = std::make_shared<ClosableKeyValue>(&kv);
  const RendezvousRound detached = round.Detached();
  ConnectFn connect = [guarded, detached, options, timeout] {
    GlooKeyValueStore store(guarded.get(), detached.prefix(), timeout,
                            [&guarded, &detached](const std::string& key) {
                              return detached.StillCurrent(*guarded, PeerOfGlooKey(key));
                            });
    return ConnectGloo(options, store);
  };
  return ConnectWithWatchdog(
      std::move(connect), absl::Now() + timeout, [&round] { return round.Abandoned(); },
      [guarded] { guarded->Close(); });
}

}  // namespace pipeplan::worker
