// Cost of scoring one schedule in the planner's search loop: generation,
// send/recv insertion and timed simulation. Prints a table of
// schedule x (p, m, v) x milliseconds (best of several runs, one core), then
// runs any Google Benchmark cases selected with --benchmark_filter.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan::schedule {
namespace {

// One full evaluation; returns the simulated step time so the work cannot be
// optimised away. Aborts on error: the cases below are all valid.
double EvaluateOnce(ScheduleKind kind, int p, int m, int v, bool lower = true) {
  absl::StatusOr<PipelineSchedule> compute = BuildSchedule(kind, p, m, v);
  if (!compute.ok()) {
    std::fprintf(stderr, "%s\n", std::string(compute.status().message()).c_str());
    std::abort();
  }
  absl::StatusOr<PipelineSchedule> lowered = lower ? InsertSendRecv(*compute) : compute;
  if (!lowered.ok()) std::abort();
  StageCosts costs = StageCosts::Uniform(compute->num_stages, 1.0, 1.0, 1.0);
  costs.forward_transfer.assign(compute->num_stages - 1, 0.1);
  costs.backward_transfer.assign(compute->num_stages - 1, 0.1);
  absl::StatusOr<SimulationResult> result = Simulate(*lowered, costs);
  if (!result.ok()) std::abort();
  return result->step_seconds;
}

double BestMillis(ScheduleKind kind, int p, int m, int v, bool lower, int repeats) {
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(EvaluateOnce(kind, p, m, v, lower));
    const auto stop = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return best;
}

void PrintTable() {
  const std::vector<std::tuple<int, int, int>> shapes = {
      {4, 8, 2}, {8, 64, 2}, {16, 256, 4}, {32, 512, 4}, {64, 1024, 4}};
  // "lowered": build + InsertSendRecv + Simulate. "compute-only": build +
  // Simulate on the compute-only schedule (same step time with free comms).
  std::printf("%-22s %4s %5s %2s %12s %14s\n", "schedule", "p", "m", "v", "lowered ms",
              "compute-only ms");
  for (ScheduleKind kind : kAllScheduleKinds) {
    for (const auto& [p, m, v] : shapes) {
      const int chunks = StagesPerRank(kind, v) == 1 ? 1 : v;
      if (kind == ScheduleKind::kDualPipeV && m < 2 * p) continue;
      std::printf("%-22s %4d %5d %2d %12.2f %14.2f\n", std::string(ScheduleKindName(kind)).c_str(),
                  p, m, StagesPerRank(kind, chunks), BestMillis(kind, p, m, chunks, true, 5),
                  BestMillis(kind, p, m, chunks, false, 5));
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

}  // namespace
}  // namespace pipeplan::schedule

int main(int argc, char** argv) {
  pipeplan::schedule::PrintTable();
  bool filtered = false;
  for (int i = 1; i < argc; ++i) filtered |= std::strncmp(argv[i], "--benchmark", 11) == 0;
  if (!filtered) return 0;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
