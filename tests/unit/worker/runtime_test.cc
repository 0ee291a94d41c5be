// The stage runtime over the in-memory transport: every built-in schedule
// completes, compute runs in dependency order, the right bytes arrive, and
// each action gets a timing.
#include "pipeplan/worker/runtime/runtime.h"

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/worker/executors/synthetic_executor.h"
#include "pipeplan/worker/transport/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

using schedule::Action;
using schedule::ActionType;
using schedule::ScheduleKind;

struct Event {
  int64_t start = 0;
  int64_t end = 0;
};

// Shared by every rank's executor: a global clock of sequence numbers.
struct Recorder {
  std::atomic<int64_t> clock{0};
  absl::Mutex mu;
  std::map<std::tuple<int, int, int>, Event> events;  // (type, stage, mb)
  std::vector<std::string> errors;
};

// Writes (direction, producing stage, microbatch) into every message and
// checks it on arrival.
class RecordingExecutor final : public Executor {
 public:
  explicit RecordingExecutor(Recorder* rec) : rec_(rec) {}
  absl::Status BeginStep(int64_t) override { return absl::OkStatus(); }
  absl::Status Compute(const Action& a) override {
    const int expect_from = a.type == ActionType::kForward ? a.stage - 1 : a.stage + 1;
    const int dir = a.type == ActionType::kForward ? 0 : 1;
    if (a.type != ActionType::kBackwardWeight) {
      auto it = recv_.find({dir, a.stage, a.microbatch});
      if (it != recv_.end()) {
        int32_t got[3];
        std::memcpy(got, it->second.data(), sizeof got);
        if (got[0] != dir || got[1] != expect_from || got[2] != a.microbatch) {
          absl::MutexLock l(&rec_->mu);
          rec_->errors.push_back("bad payload for " + schedule::ActionToString(a));
        }
      }
    }
    Event e;
    e.start = rec_->clock.fetch_add(1);
    e.end = rec_->clock.fetch_add(1);
    absl::MutexLock l(&rec_->mu);
    rec_->events[{static_cast<int>(a.type), a.stage, a.microbatch}] = e;
    return absl::OkStatus();
  }
  absl::StatusOr<std::span<const std::byte>> SendBuffer(const Action& a) override {
    const int dir = a.type == ActionType::kSendF ? 0 : 1;
    std::vector<std::byte>& b = send_[{dir, a.stage, a.microbatch}];
    const int32_t payload[3] = {dir, a.stage, a.microbatch};
    b.resize(64);
    std::memcpy(b.data(), payload, sizeof payload);
    return std::span<const std::byte>(b);
  }
  absl::StatusOr<std::span<std::byte>> RecvBuffer(const Action& a) override {
    const int dir = a.type == ActionType::kRecvF ? 0 : 1;
    std::vector<std::byte>& b = recv_[{dir, a.stage, a.microbatch}];
    b.assign(64, std::byte{0xff});
    return std::span<std::byte>(b);
  }
  absl::Status EndStep() override {
    send_.clear();
    recv_.clear();
    return absl::OkStatus();
  }
  double PeakMemoryBytes() const override { return 0; }

 private:
  Recorder* rec_;
  std::map<std::tuple<int, int, int>, std::vector<std::byte>> send_, recv_;
};

// Runs `steps` steps of the lowered schedule on one thread per rank.
std::vector<absl::StatusOr<StepResult>> RunAll(const schedule::PipelineSchedule& lowered,
                                               std::vector<std::unique_ptr<Executor>>& executors,
                                               int steps = 1) {
  MemoryHub hub(lowered.num_ranks);
  std::vector<absl::StatusOr<StepResult>> results(lowered.num_ranks, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < lowered.num_ranks; ++r) {
    threads.emplace_back([&, r] {
      auto runtime = StageRuntime::ForRank(lowered, r, absl::Seconds(10));
      if (!runtime.ok()) {
        results[r] = runtime.status();
        return;
      }
      std::unique_ptr<Transport> t = hub.Connect(r);
      for (int s = 0; s < steps; ++s) {
        results[r] = runtime->RunStep(s, *t, *executors[r]);
        if (!results[r].ok()) return;
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

TEST(StageRuntime, EveryScheduleCompletesInDependencyOrder) {
  for (ScheduleKind kind : schedule::kAllScheduleKinds) {
    int ran = 0;
    for (int p : {2, 3, 4}) {
      for (int m : {2, 4, 8}) {
        auto compute = schedule::BuildSchedule(kind, p, m, 2);
        if (!compute.ok()) continue;  // e.g. DualPipeV needs m >= 2p
        auto lowered = schedule::InsertSendRecv(*compute);
        ASSERT_TRUE(lowered.ok()) << lowered.status();
        SCOPED_TRACE(std::string(schedule::ScheduleKindName(kind)) + " p=" + std::to_string(p) +
                     " m=" + std::to_string(m));
        Recorder rec;
        std::vector<std::unique_ptr<Executor>> ex;
        for (int r = 0; r < p; ++r) ex.push_back(std::make_unique<RecordingExecutor>(&rec));
        auto results = RunAll(*lowered, ex);
        for (int r = 0; r < p; ++r) {
          ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
          size_t n = 0;
          for (const auto& slot : lowered->programs[r]) n += slot.has_value();
          EXPECT_EQ(results[r]->timings.size(), n);
        }
        EXPECT_TRUE(rec.errors.empty()) << rec.errors.front();
        const int S = lowered->num_stages;
        auto ev = [&](ActionType t, int s, int mb) -> const Event* {
          auto it = rec.events.find({static_cast<int>(t), s, mb});
          return it == rec.events.end() ? nullptr : &it->second;
        };
        auto bwd = [&](int s, int mb) {
          const Event* e = ev(ActionType::kFullBackward, s, mb);
          return e ? e : ev(ActionType::kBackwardInput, s, mb);
        };
        for (int s = 0; s < S; ++s) {
          for (int mb = 0; mb < m; ++mb) {
            const Event* f = ev(ActionType::kForward, s, mb);
            const Event* b = bwd(s, mb);
            ASSERT_NE(f, nullptr) << "F missing for stage " << s << " mb " << mb;
            ASSERT_NE(b, nullptr) << "backward missing for stage " << s << " mb " << mb;
            if (s > 0) {
              EXPECT_LT(ev(ActionType::kForward, s - 1, mb)->end, f->start);
            }
            EXPECT_LT(f->end, b->start);
            if (s + 1 < S) {
              EXPECT_LT(bwd(s + 1, mb)->end, b->start);
            }
            if (const Event* w = ev(ActionType::kBackwardWeight, s, mb)) {
              EXPECT_LT(ev(ActionType::kBackwardInput, s, mb)->end, w->start);
            }
          }
        }
        ++ran;
      }
    }
    EXPECT_GT(ran, 0) << schedule::ScheduleKindName(kind);
  }
}

TEST(StageRuntime, RecordsTimingsOfComputeAndCommunication) {
  auto compute = schedule::BuildSchedule(ScheduleKind::k1F1B, 2, 4);
  ASSERT_TRUE(compute.ok());
  auto lowered = schedule::InsertSendRecv(*compute);
  ASSERT_TRUE(lowered.ok());
  std::vector<std::unique_ptr<Executor>> ex;
  for (int r = 0; r < 2; ++r) {
    SyntheticOptions o;
    o.forward_seconds = {0.002, 0.002};
    o.backward_seconds = {0.004, 0.004};
    o.boundary_bytes = {1 << 16};
    ex.push_back(std::make_unique<SyntheticExecutor>(o));
  }
  auto results = RunAll(*lowered, ex, 2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status();
    int sends = 0, recvs = 0, computes = 0;
    for (const ActionTime& t : results[r]->timings) {
      EXPECT_GE(t.seconds, 0);
      if (t.action.type == ActionType::kForward) {
        EXPECT_GE(t.seconds, 0.0019);
        ++computes;
      } else if (t.action.type == ActionType::kFullBackward) {
        EXPECT_GE(t.seconds, 0.0039);
        ++computes;
      } else if (t.action.type == ActionType::kSendF || t.action.type == ActionType::kSendB) {
        ++sends;
      } else {
        ++recvs;
      }
    }
    EXPECT_EQ(computes, 8);
    EXPECT_EQ(sends, 4);
    EXPECT_EQ(recvs, 4);
    // 4 F + 4 B per rank are serial: the step takes at least 24 ms.
    EXPECT_GE(results[r]->step_seconds, 0.024);
    EXPECT_EQ(results[r]->step, 1);
  }
}

// --noise: each step's compute takes one factor in [1 - R, 1 + R], the same
// for the same seed and step (a rerun draws the same), others for others.
TEST(SyntheticExecutor, NoiseIsOneSeededDrawPerStep) {
  SyntheticOptions o;
  o.forward_seconds = {0.01};
  o.backward_seconds = {0.02};
  o.noise = 0.1;
  o.noise_seed = 7;
  SyntheticExecutor a(o), b(o);
  const Action f{.stage = 0, .type = ActionType::kForward, .microbatch = 0};
  const Action bw{.stage = 0, .type = ActionType::kFullBackward, .microbatch = 1};
  std::set<double> seen;
  for (int64_t step = 0; step < 20; ++step) {
    ASSERT_TRUE(a.BeginStep(step).ok());
    ASSERT_TRUE(b.BeginStep(step).ok());
    const double fa = a.ComputeSeconds(f);
    EXPECT_EQ(fa, b.ComputeSeconds(f));
    EXPECT_GE(fa, 0.009);
    EXPECT_LE(fa, 0.011);
    EXPECT_DOUBLE_EQ(a.ComputeSeconds(bw) / fa, 2.0);  // one draw for the whole step
    seen.insert(fa);
  }
  EXPECT_GT(seen.size(), 15u);
  o.noise = 0;
  SyntheticExecutor quiet(o);
  ASSERT_TRUE(quiet.BeginStep(3).ok());
  EXPECT_DOUBLE_EQ(quiet.ComputeSeconds(f), 0.01);
}

// The synthetic executor stands in for an accelerator: a compute lasts its
// time on the wall clock but leaves the host CPU to the transport threads
// (busy-waiting a whole millisecond per action, four workers on two cores
// delayed each other's messages). Ten 5 ms computes hold the thread's CPU
// for well under the 10 ms that a 1 ms spin each would.
TEST(SyntheticExecutor, AComputeWaitsWithoutHoldingTheCpu) {
  auto thread_cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_cpu();
  for (int i = 0; i < 10; ++i) SpinFor(0.005);
  const double cpu = thread_cpu() - cpu0;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  EXPECT_GE(wall, 0.05);
  EXPECT_LT(cpu, 0.006) << "CPU seconds held by ten 5 ms computes";
}

TEST(StageRuntime, RejectsActionsOfAnotherRank) {
  RuntimeOptions o;
  o.rank = 0;
  o.num_stages = 2;
  o.num_microbatches = 1;
  o.stage_to_rank = {0, 1};
  schedule::RankProgram program = {Action{1, ActionType::kForward, 0}};
  auto r = StageRuntime::Create(o, program);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StageRuntime, ForRankRejectsARankTheScheduleDoesNotHave) {
  auto compute = schedule::BuildSchedule(ScheduleKind::kGPipe, 2, 1);
  ASSERT_TRUE(compute.ok());
  auto lowered = schedule::InsertSendRecv(*compute);
  ASSERT_TRUE(lowered.ok());
  EXPECT_TRUE(StageRuntime::ForRank(*lowered, 1, absl::Seconds(1)).ok());
  EXPECT_EQ(StageRuntime::ForRank(*lowered, 2, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StageRuntime::ForRank(*lowered, -1, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StageRuntime, MissingPeerTimesOut) {
  auto compute = schedule::BuildSchedule(ScheduleKind::kGPipe, 2, 1);
  ASSERT_TRUE(compute.ok());
  auto lowered = schedule::InsertSendRecv(*compute);
  ASSERT_TRUE(lowered.ok());
  MemoryHub hub(2);
  auto runtime = StageRuntime::ForRank(*lowered, 1, absl::Milliseconds(50));
  ASSERT_TRUE(runtime.ok());
  Recorder rec;
  RecordingExecutor ex(&rec);
  auto t = hub.Connect(1);
  auto r = runtime->RunStep(0, *t, ex);  // rank 0 never runs
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
}

TEST(MemoryHub, AllReduceMaxAgrees) {
  MemoryHub hub(3);
  std::vector<int64_t> got(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto t = hub.Connect(r);
      for (int round = 0; round < 3; ++round) {
        auto v = t->AllReduceMax(r * 10 + round, absl::Seconds(5));
        got[r] = v.ok() ? *v : -1;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(got, (std::vector<int64_t>{22, 22, 22}));
}

}  // namespace
}  // namespace pipeplan::worker
