// State moves at the speed of the wire (issue 26; docs/snapshots.md): two
// ranks (threads, each with its own Gloo context over 127.0.0.1, real TCP)
// hold the parameters and AdamW state of a model (--mb in all, --params
// parameters) and
//
//   plan switch      export, move every record to the other rank, import
//                    (a re-split where every parameter changes owner)
//   peer snapshot    a snapshot round: export into the own slot, send to
//                    the peer, until the peer holds it
//   checkpoint write each rank writes its shard (fsync'd) at once
//   checkpoint read  each rank reads its shard back and imports it
//
// "before": the pickled path every one of these took until issue 26
// (state_move_bench_pickle.h; builds with LibTorch only). "after": tensor
// records in state packs (package/tensor_record.h, state_pack.h).
// MB/s = all ranks' bytes / the slowest rank's seconds, median of --reps.
//
//   ./build/bench/pipeplan-state-move-bench [--mb 1170] [--params 150]
//       [--reps 3] [--dir /tmp]
#include <gloo/rendezvous/hash_store.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "pipeplan/worker/package/checkpoint.h"
#include "pipeplan/worker/package/state_pack.h"
#include "pipeplan/worker/package/state_transfer.h"
#include "pipeplan/worker/package/tensor_record.h"
#include "pipeplan/worker/snapshot/snapshot_exchange.h"
#include "pipeplan/worker/transport/gloo_transport.h"
#ifdef PIPEPLAN_BENCH_PICKLE
#include "state_move_bench_pickle.h"
#endif

namespace pipeplan::bench {
namespace {

using worker::NamedState;
using worker::NamedStateView;
using worker::StatePack;
using worker::Transport;

// One rank's model state: `params` parameters of 3 x n floats (parameter,
// exp_avg, exp_avg_sq) and where imports land.
struct Rank {
  int rank = 0;
  int params = 0;
  int64_t n = 0;
  std::vector<float> data;
  std::vector<float> dest;
  // Snapshot rounds reuse their slots from round to round, as a worker's do.
  std::unique_ptr<worker::SnapshotStore> store;
  std::unique_ptr<worker::SnapshotExchange> exchange;
  int64_t step = 0;
  std::string Name(int i) const { return absl::StrCat("r", rank, ".p", i); }
  size_t Bytes() const { return data.size() * sizeof(float); }
};

std::vector<worker::TensorMeta> Metas(int64_t n) {
  return {
      {"param", 6, 4, {n}}, {"exp_avg", 6, 4, {n}}, {"exp_avg_sq", 6, 4, {n}}, {"step", 4, 8, {}}};
}

// What TorchExecutor::ExportPack does on the CPU: a record per parameter,
// each tensor copied once into it.
void ExportRaw(const Rank& r, StatePack& pack) {
  const std::vector<worker::TensorMeta> metas = Metas(r.n);
  const worker::RecordLayout layout = worker::LayOutRecord("adamw", metas);
  std::map<std::string, size_t> sizes;
  for (int i = 0; i < r.params; ++i) sizes[r.Name(i)] = layout.total;
  int i = 0;
  for (auto& [name, blob] : worker::StartPack(sizes, pack)) {
    worker::WriteRecordHeader("adamw", metas, layout, blob);
    const float* src = r.data.data() + 3 * r.n * (i++);
    for (int k = 0; k < 3; ++k) {
      std::memcpy(blob.data() + layout.offsets[k], src + k * r.n, r.n * sizeof(float));
    }
    const int64_t step = 1;
    std::memcpy(blob.data() + layout.offsets[3], &step, sizeof(step));
  }
}

// What ImportRecord does: parse, then copy each tensor into place.
void ImportRaw(const NamedStateView& views, Rank& r) {
  int i = 0;
  for (const auto& [name, blob] : views) {
    auto rec = worker::ParseRecord(blob);
    if (!rec.ok()) std::abort();
    float* dst = r.dest.data() + 3 * r.n * (i++ % r.params);
    for (int k = 0; k < 3; ++k) std::memcpy(dst + k * r.n, rec->tensors[k].data.data(), r.n * 4);
  }
}

// Every record of rank 0 to rank 1 and back.
absl::StatusOr<NamedState> Swap(Transport& t, const NamedStateView& mine, const Rank& r) {
  ParameterOwners from, to;
  for (int q = 0; q < 2; ++q) {
    for (int i = 0; i < r.params; ++i) {
      const std::string name = absl::StrCat("r", q, ".p", i);
      from[name] = {q};
      to[name] = {1 - q};
    }
  }
  return worker::MoveState(t, mine, from, to, 1, absl::Seconds(600));
}

double SwitchAfter(Transport& t, Rank& r) {
  const absl::Time start = absl::Now();
  StatePack pack;
  ExportRaw(r, pack);
  absl::StatusOr<NamedState> moved = Swap(t, pack.views, r);
  if (!moved.ok()) std::abort();
  ImportRaw(worker::ViewsOf(*moved), r);
  return absl::ToDoubleSeconds(absl::Now() - start);
}

absl::Status Round(Rank& r, size_t bytes) {
  absl::Status s = r.exchange->Round(++r.step, bytes, [&r](StatePack& p) {
    ExportRaw(r, p);
    return absl::OkStatus();
  });
  return s.ok() ? r.exchange->Finish() : s;
}

// A round in the steady state (the slots' memory already in use): from the
// export until the peer holds the snapshot.
double SnapshotRound(Transport& t, Rank& r) {
  StatePack sizing;
  ExportRaw(r, sizing);  // the size (an executor computes it without a copy)
  if (!r.exchange) {
    r.store = std::make_unique<worker::SnapshotStore>(size_t{1} << 40);
    r.exchange = std::make_unique<worker::SnapshotExchange>(
        t, *r.store, worker::SnapshotExchangeOptions{.world_devices = {"d0", "d1"}});
    for (int warm = 0; warm < 2; ++warm) {
      if (!Round(r, sizing.bytes.size()).ok()) std::abort();
    }
  }
  const absl::Time start = absl::Now();
  if (!Round(r, sizing.bytes.size()).ok()) std::abort();
  return absl::ToDoubleSeconds(absl::Now() - start);
}

std::string ShardPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/state_move_bench_", ::getpid(), "_", rank, ".bin");
}

double CheckpointWrite(const std::string& dir, Rank& r) {
  const absl::Time start = absl::Now();
  StatePack pack;
  ExportRaw(r, pack);
  if (!worker::WriteFileAtomically(ShardPath(dir, r.rank), pack.bytes).ok()) std::abort();
  return absl::ToDoubleSeconds(absl::Now() - start);
}

double CheckpointRead(const std::string& dir, Rank& r) {
  const absl::Time start = absl::Now();
  auto bytes = worker::ReadFileBytes(ShardPath(dir, r.rank));
  if (!bytes.ok()) std::abort();
  auto views = worker::ParseStatePack(std::as_bytes(std::span<const char>(*bytes)));
  if (!views.ok()) std::abort();
  ImportRaw(*views, r);
  return absl::ToDoubleSeconds(absl::Now() - start);
}

#ifdef PIPEPLAN_BENCH_PICKLE
double SwitchBefore(Transport& t, Rank& r) {
  const absl::Time start = absl::Now();
  NamedState mine;
  for (int i = 0; i < r.params; ++i) {
    mine[r.Name(i)] = PickleParameter(r.data.data() + 3 * r.n * i, r.n, 1);
  }
  absl::StatusOr<NamedState> moved = Swap(t, worker::ViewsOf(mine), r);
  if (!moved.ok()) std::abort();
  int i = 0;
  for (const auto& [name, blob] : *moved) {
    UnpickleParameter(blob, r.dest.data() + 3 * r.n * (i++ % r.params), r.n);
  }
  return absl::ToDoubleSeconds(absl::Now() - start);
}

double CheckpointWriteBefore(const std::string& dir, Rank& r) {
  const absl::Time start = absl::Now();
  const std::vector<char> bytes = PickleShard(r.data.data(), r.params, r.n, 1);
  const std::string path = ShardPath(dir, r.rank) + ".pt";
  if (!worker::WriteFileAtomically(path, std::as_bytes(std::span<const char>(bytes))).ok()) {
    std::abort();
  }
  return absl::ToDoubleSeconds(absl::Now() - start);
}
#endif

struct Bench {
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<Rank> ranks;
  int reps = 3;
};

using RankFn = std::function<double(Transport&, Rank&)>;

// Runs `fn` on both ranks at once, reps times: the median of the slowest
// rank's seconds.
double Measure(Bench& b, const RankFn& fn) {
  std::vector<double> times;
  for (int i = 0; i < b.reps; ++i) {
    double t[2] = {0, 0};
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] { t[r] = fn(*b.transports[r], b.ranks[r]); });
    }
    for (auto& th : threads) th.join();
    times.push_back(std::max(t[0], t[1]));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

absl::Status Connect(Bench& b) {
  gloo::rendezvous::HashStore store;
  std::vector<absl::StatusOr<std::unique_ptr<Transport>>> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      got[r] = worker::ConnectGloo(
          {.rank = r, .size = 2, .host = "127.0.0.1", .timeout = absl::Seconds(600)}, store);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& t : got) {
    if (!t.ok()) return t.status();
    b.transports.push_back(*std::move(t));
  }
  return absl::OkStatus();
}

void Row(const char* what, double mb, double before, double after) {
  auto cell = [mb](double s) {
    return s > 0 ? absl::StrFormat("%8.2f | %9.0f", s, mb / s)
                 : std::string("       - |         -");
  };
  std::printf("| %-34s | %7.0f | %s | %s |\n", what, mb, cell(before).c_str(), cell(after).c_str());
}

int Run(Bench& b, const std::string& dir) {
  double mb = 0;
  for (const Rank& r : b.ranks) mb += r.Bytes() / 1e6;
  std::printf("| %-34s | %7s | %8s | %9s | %8s | %9s |\n", "path", "MB", "before s", "before MB/s",
              "after s", "after MB/s");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(9, '-').c_str(),
              std::string(10, '-').c_str(), std::string(11, '-').c_str(),
              std::string(10, '-').c_str(), std::string(11, '-').c_str());
  double before_switch = 0, before_write = 0;
#ifdef PIPEPLAN_BENCH_PICKLE
  before_switch = Measure(b, SwitchBefore);
  before_write = Measure(b, [&dir](Transport&, Rank& r) { return CheckpointWriteBefore(dir, r); });
#endif
  Row("plan switch (Gloo, 127.0.0.1)", mb, before_switch, Measure(b, SwitchAfter));
  Row("peer snapshot (Gloo, 127.0.0.1)", mb, 0, Measure(b, SnapshotRound));
  for (Rank& r : b.ranks) {
    r.exchange.reset();
    r.store.reset();
  }
  Row("checkpoint write (fsync)", mb, before_write,
      Measure(b, [&dir](Transport&, Rank& r) { return CheckpointWrite(dir, r); }));
  Row("checkpoint read (page cache)", mb, 0,
      Measure(b, [&dir](Transport&, Rank& r) { return CheckpointRead(dir, r); }));
  for (int r = 0; r < 2; ++r) {
    std::remove(ShardPath(dir, r).c_str());
    std::remove((ShardPath(dir, r) + ".pt").c_str());
  }
  return 0;
}

}  // namespace
}  // namespace pipeplan::bench

int main(int argc, char** argv) {
  double mb = 1170;
  int params = 150;
  std::string dir = "/tmp";
  pipeplan::bench::Bench b;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mb")
      mb = std::atof(argv[i + 1]);
    else if (flag == "--params")
      params = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--reps")
      b.reps = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--dir")
      dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--mb MB] [--params N] [--reps N] [--dir DIR]\n", argv[0]);
      return 2;
    }
  }
  // Each rank holds half the state: params parameters of 3 x n floats.
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(mb * 1e6 / 2 / params / 12));
  for (int r = 0; r < 2; ++r) {
    pipeplan::bench::Rank rank{.rank = r, .params = params, .n = n};
    rank.data.assign(static_cast<size_t>(3 * n * params), 0.5f + r);
    rank.dest.assign(rank.data.size(), 0.0f);
    b.ranks.push_back(std::move(rank));
  }
  if (absl::Status s = pipeplan::bench::Connect(b); !s.ok()) {
    std::fprintf(stderr, "connecting: %s\n", s.ToString().c_str());
    return 1;
  }
  return pipeplan::bench::Run(b, dir);
}
