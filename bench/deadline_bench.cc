// Deadline benchmark: how far past its time budget a solve returns, and how
// soon a cancelled solve stops. These are wall-clock figures of a (possibly
// loaded) machine, so they live here and not in timed unit tests; the unit
// tests check what a deadline or a cancellation must produce (a valid
// incumbent with a bound, or CANCELLED).
//
//   ./build/bench/pipeplan-deadline-bench [--repeat N]
//
// Prints one table: case, budget, median / max seconds over N runs, and the
// median overshoot past the budget.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "bench_inputs.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/partition.h"
#include "pipeplan/core/planner.h"

namespace pipeplan {
namespace {

using bench::Load;
using bench::Loaded;

std::string Data(const std::string& name) {
  return std::string(PIPEPLAN_SOURCE_DIR) + "/tests/data/" + name;
}

PartitionProblem Pipeline(const CostModel& cost, int stages) {
  PartitionProblem p;
  p.cost = &cost;
  for (int j = 0; j < stages; ++j) {
    p.stage_device.push_back(j);
    p.stage_inflight.push_back(stages - j);
  }
  return p;
}

// Runs `solve` `repeat` times; prints a row of its wall seconds against `budget`.
void Row(const std::string& name, double budget, int repeat, const std::function<bool()>& solve) {
  std::vector<double> seconds;
  bool all_ok = true;
  for (int i = 0; i < repeat; ++i) {
    const absl::Time start = absl::Now();
    all_ok = solve() && all_ok;
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  std::printf("| %-44s | %6.2f | %7.3f | %7.3f | %+8.3f | %-3s |\n", name.c_str(), budget, median,
              seconds.back(), median - budget, all_ok ? "yes" : "NO");
}

// MILP on ResNet-50 over `k` stages, warm-started from the chain DP.
void MilpRows(const Loaded& in, int repeat) {
  CostModel cost(*in.graph, *in.cluster, {});
  for (int k : {8, 16}) {
    PartitionProblem problem = Pipeline(cost, k);
    problem.relative_gap = 1e-9;  // never stop on the gap: only the deadline ends it
    auto dp = MakeChainDpPartitioner()->Solve(problem);
    if (!dp.ok()) std::exit(1);
    problem.warm_start = dp->stage_of_node;
    for (double budget : {0.2, 1.0}) {
      Row("MILP resnet50 k=" + std::to_string(k) + " deadline", budget, repeat, [&] {
        problem.deadline = absl::Now() + absl::Seconds(budget);
        return MakeMilpPartitioner()->Solve(problem).ok();
      });
    }
    Row("MILP resnet50 k=" + std::to_string(k) + " cancelled after", 0.3, repeat, [&] {
      problem.deadline = absl::InfiniteFuture();
      std::atomic<bool> cancelled{false};
      problem.cancelled = &cancelled;
      std::thread canceller([&] {
        absl::SleepFor(absl::Milliseconds(300));
        cancelled = true;
      });
      auto r = MakeMilpPartitioner()->Solve(problem);
      canceller.join();
      problem.cancelled = nullptr;
      return r.ok() || r.status().code() == absl::StatusCode::kCancelled;
    });
  }
}

void PlanRows(const Loaded& in, int repeat) {
  for (double budget : {1.0, 3.0}) {
    Row("MakePlan resnet50 8 ranks time_limit", budget, repeat, [&] {
      return MakePlan(*in.graph, *in.cluster,
                      {.num_ranks = 8,
                       .microbatches = 32,
                       .schedule = schedule::ScheduleKind::k1F1B,
                       .time_limit_seconds = budget,
                       .relative_gap = 1e-9})
          .ok();
    });
  }
}

}  // namespace
}  // namespace pipeplan

int main(int argc, char** argv) {
  int repeat = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::max(1, std::atoi(argv[i + 1]));
  }
  pipeplan::bench::Loaded in = pipeplan::bench::Load(pipeplan::Data("resnet50.json"),
                                                     pipeplan::Data("cluster_2x8_h100.json"));
  std::printf("| %-44s | %6s | %7s | %7s | %8s | %-3s |\n", "case", "budget", "median", "max",
              "overshoot", "ok");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(8, '-').c_str(),
              std::string(9, '-').c_str(), std::string(9, '-').c_str(),
              std::string(10, '-').c_str(), std::string(5, '-').c_str());
  pipeplan::MilpRows(in, repeat);
  pipeplan::PlanRows(in, repeat);
  return 0;
}
