// Cost of scoring one schedule in the planner's search loop: generation,
// send/recv insertion and timed simulation. Prints a table of
// schedule x (p, m, v) x milliseconds (median of --repeats=N runs, default 7,
// thread CPU time), then runs any Google Benchmark cases selected with
// --benchmark_filter.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/core/schedule/shared_compute.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan::schedule {
namespace {

StageCosts BenchCosts(int num_stages) {
  StageCosts costs = StageCosts::Uniform(num_stages, 1.0, 1.0, 1.0);
  costs.forward_transfer.assign(num_stages - 1, 0.1);
  costs.backward_transfer.assign(num_stages - 1, 0.1);
  return costs;
}

[[noreturn]] void Die(const absl::Status& status) {
  std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
  std::abort();
}

// One full evaluation with fresh schedules (what a one-off caller pays);
// returns the simulated step time so the work cannot be optimised away.
// Aborts on error: the cases below are all valid.
double EvaluateOnce(ScheduleKind kind, int p, int m, int v, bool lower = true) {
  absl::StatusOr<PipelineSchedule> compute = BuildSchedule(kind, p, m, v);
  if (!compute.ok()) Die(compute.status());
  absl::StatusOr<PipelineSchedule> lowered = lower ? InsertSendRecv(*compute) : compute;
  if (!lowered.ok()) Die(lowered.status());
  absl::StatusOr<SimulationResult> result = Simulate(*lowered, BenchCosts(compute->num_stages));
  if (!result.ok()) Die(result.status());
  return result->step_seconds;
}

// The same through the buffer-reusing overloads, as a search loop that keeps
// one workspace per thread does: no allocation or page faults after the first
// call.
struct Workspace {
  PipelineSchedule compute, lowered;
};
double EvaluateReusing(Workspace& ws, ScheduleKind kind, int p, int m, int v) {
  if (absl::Status st = BuildSchedule(kind, p, m, v, &ws.compute); !st.ok()) Die(st);
  if (absl::Status st = InsertSendRecv(ws.compute, &ws.lowered); !st.ok()) Die(st);
  absl::StatusOr<SimulationResult> result = Simulate(ws.lowered, BenchCosts(ws.compute.num_stages));
  if (!result.ok()) Die(result.status());
  return result->step_seconds;
}

// CPU time of the calling thread in milliseconds: the "one core" budget,
// and unlike wall-clock time not inflated when other processes share the
// machine (on an idle core the two agree).
double ThreadMillis() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// Median thread-CPU milliseconds of `repeats` calls of `fn`.
template <typename Fn>
double MedianMillis(int repeats, Fn fn) {
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const double start = ThreadMillis();
    benchmark::DoNotOptimize(fn());
    ms.push_back(ThreadMillis() - start);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void PrintTable(int repeats) {
  const std::vector<std::tuple<int, int, int>> shapes = {
      {4, 8, 2}, {8, 64, 2}, {16, 256, 4}, {32, 512, 4}, {64, 1024, 4}};
  // "lowered": build + InsertSendRecv + Simulate, fresh schedules each time.
  // "reused": the same through the overloads that reuse a workspace.
  // "compute-only": build + Simulate on the compute-only schedule (same step
  // time with free communication). Median of `repeats` runs, thread CPU time.
  std::printf("%-22s %4s %5s %2s %8s %11s %10s %15s\n", "schedule", "p", "m", "v", "actions",
              "lowered ms", "reused ms", "compute-only ms");
  Workspace ws;
  for (ScheduleKind kind : kAllScheduleKinds) {
    for (const auto& [p, m, v] : shapes) {
      const int chunks = StagesPerRank(kind, v) == 1 ? 1 : v;
      if (kind == ScheduleKind::kDualPipeV && m < 2 * p) continue;
      EvaluateReusing(ws, kind, p, m, chunks);  // warm the workspace
      const double lowered =
          MedianMillis(repeats, [&] { return EvaluateOnce(kind, p, m, chunks, true); });
      const double reused =
          MedianMillis(repeats, [&] { return EvaluateReusing(ws, kind, p, m, chunks); });
      const double compute =
          MedianMillis(repeats, [&] { return EvaluateOnce(kind, p, m, chunks, false); });
      std::printf("%-22s %4d %5d %2d %8d %11.2f %10.2f %15.2f\n",
                  std::string(ScheduleKindName(kind)).c_str(), p, m, StagesPerRank(kind, chunks),
                  ws.lowered.NumActions(), lowered, reused, compute);
    }
  }
}

void BM_Evaluate(benchmark::State& state) {
  const auto kind = static_cast<ScheduleKind>(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(EvaluateOnce(kind, static_cast<int>(state.range(1)),
                                          static_cast<int>(state.range(2)),
                                          static_cast<int>(state.range(3))));
  }
}
BENCHMARK(BM_Evaluate)
    ->ArgNames({"kind", "p", "m", "v"})
    ->Args({static_cast<int>(ScheduleKind::kInterleaved1F1B), 64, 1024, 4})
    ->Args({static_cast<int>(ScheduleKind::k1F1B), 64, 1024, 1})
    ->Args({static_cast<int>(ScheduleKind::kZBVZeroBubble), 64, 1024, 2})
    ->Unit(benchmark::kMillisecond);

// SimulateShared on a lowered 1F1B schedule whose ranks sit 8 to a pool of
// 4 CPUs (CPU workers, 8 per machine): the prediction path, not the search
// loop, so it only needs to stay well under a second at p = 64.
void BM_SimulateShared(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0)), m = static_cast<int>(state.range(1));
  absl::StatusOr<PipelineSchedule> compute = BuildSchedule(ScheduleKind::k1F1B, p, m, 1);
  if (!compute.ok()) Die(compute.status());
  absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(*compute);
  if (!lowered.ok()) Die(lowered.status());
  ComputeSharing sharing;
  for (int r = 0; r < p; ++r) {
    sharing.rank_pool.push_back(r / 8);
    sharing.rank_load.push_back(1);
  }
  sharing.pool_capacity.assign((p + 7) / 8, 4);
  const StageCosts costs = BenchCosts(p);
  for (auto _ : state) {
    absl::StatusOr<SimulationResult> result = SimulateShared(*lowered, costs, sharing);
    if (!result.ok()) Die(result.status());
    benchmark::DoNotOptimize(result->step_seconds);
  }
}
BENCHMARK(BM_SimulateShared)
    ->ArgNames({"p", "m"})
    ->Args({8, 64})
    ->Args({64, 64})
    ->Args({64, 1024})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pipeplan::schedule

int main(int argc, char** argv) {
  // --repeats=N: runs per table cell (median reported).
  int repeats = 7;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--repeats=", 10) == 0)
      repeats = std::max(1, std::atoi(argv[i] + 10));
  }
  pipeplan::schedule::PrintTable(repeats);
  bool filtered = false;
  for (int i = 1; i < argc; ++i) filtered |= std::strncmp(argv[i], "--benchmark", 11) == 0;
  if (!filtered) return 0;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
