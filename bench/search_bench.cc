// Search benchmark: what the planner chooses for the bundled example graphs
// on 8, 16 and 64 devices — ranks x replicas, schedule, microbatches,
// predicted step, bubble, memory per device, plan time — and, on 64 devices
// over 8 hosts, a GPT-2-XL-like graph and a 1K-node CNN with the predicted
// speedup over the best pure-pipeline and the best pure-data-parallel plan.
// Defaults: AdamW in bf16-mixed, DIRECT communication, the method below.
//
//   ./build/bench/pipeplan-search-bench [--method auto|dp] [--time-limit S]
//                                       [--only table|scale]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench_inputs.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"

namespace pipeplan {
namespace {

using bench::Load;
using bench::Loaded;

// Peak bytes on the fullest device: a rank holds chunks_per_rank stages.
double MemoryPerDevice(const PlanResult& p) {
  std::vector<double> per_rank(p.num_ranks, 0);
  for (size_t s = 0; s < p.stage_peak_memory.size(); ++s) {
    per_rank[s % p.num_ranks] += p.stage_peak_memory[s];
  }
  return *std::max_element(per_rank.begin(), per_rank.end());
}

struct Timed {
  absl::StatusOr<PlanResult> plan;
  double seconds = 0;
};

Timed PlanTimed(const Loaded& in, const PlanOptions& options) {
  const absl::Time t0 = absl::Now();
  Timed out{MakePlan(*in.graph, *in.cluster, options)};
  out.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  return out;
}

void PrintRow(const std::string& graph, const Loaded& in, const Timed& t) {
  if (!t.plan.ok()) {
    std::printf("| %s | %d | %s |\n", graph.c_str(), in.cluster->num_devices(),
                std::string(t.plan.status().message()).substr(0, 100).c_str());
    return;
  }
  const PlanResult& p = *t.plan;
  int recompute = 0;
  for (char r : p.stage_recompute) recompute += r;
  std::printf("| %s | %d | %d x %d | %s | %d | %.2f | %.1f%% | %.2f | %d | %s | %.2f |\n",
              graph.c_str(), in.cluster->num_devices(), p.num_ranks, p.num_replicas,
              std::string(schedule::ScheduleKindName(p.schedule)).c_str(), p.microbatches,
              p.step_seconds * 1e3, 100 * p.bubble_ratio, MemoryPerDevice(p) / (1 << 30), recompute,
              p.placement.c_str(), t.seconds);
  std::fflush(stdout);
}

struct Example {
  std::string graph;
  int global_batch;
};

void Table(const std::string& data, const std::string& bench, const PlanOptions& base) {
  std::printf(
      "| graph | devices | ranks x replicas | schedule | microbatches | step (ms) | bubble | "
      "GiB per device | recomputing stages | placement | plan (s) |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  const std::vector<Example> examples = {{"gpt_1k", 64},
                                         {"gpt_4k", 64},
                                         {"resnet50", 1024},
                                         {"inception_like", 1024},
                                         {"chain_small", 512}};
  const std::vector<std::string> clusters = {data + "cluster_8xa100.json",
                                             data + "cluster_2x8_h100.json",
                                             bench + "cluster_8x8_h100.json"};
  for (const Example& e : examples) {
    for (const std::string& cluster : clusters) {
      Loaded in = Load(data + e.graph + ".json", cluster);
      PlanOptions o = base;
      o.global_batch = e.global_batch;
      PrintRow(e.graph, in, PlanTimed(in, o));
    }
  }
}

// 64 devices: the chosen plan against the best single pipeline (one replica)
// and the best pure data parallelism (one rank).
void Scale(const std::string& bench, const PlanOptions& base) {
  std::printf(
      "\n| graph (nodes) | plan (s) | ranks x replicas | step (ms) | best pipeline: ranks, "
      "step (ms), speedup | best data parallel: replicas, step (ms), speedup |\n"
      "|---|---|---|---|---|---|\n");
  for (const Example& e : std::vector<Example>{{"gpt2_xl", 128}, {"cnn_1k", 1024}}) {
    Loaded in = Load(bench + e.graph + ".json", bench + "cluster_8x8_h100.json");
    PlanOptions o = base;
    o.global_batch = e.global_batch;
    const Timed best = PlanTimed(in, o);
    PlanOptions pipeline_only = o;
    pipeline_only.max_replicas = 1;
    PlanOptions data_only = o;
    data_only.num_ranks = 1;
    const Timed pipeline = PlanTimed(in, pipeline_only);
    const Timed data = PlanTimed(in, data_only);
    if (!best.plan.ok()) {
      std::printf("| %s | %s |\n", e.graph.c_str(), best.plan.status().ToString().c_str());
      continue;
    }
    auto versus = [&](const Timed& t, bool ranks) {
      if (!t.plan.ok()) return std::string("does not fit");
      return absl::StrFormat("%d, %.2f, %.2fx", ranks ? t.plan->num_ranks : t.plan->num_replicas,
                             t.plan->step_seconds * 1e3,
                             t.plan->step_seconds / best.plan->step_seconds);
    };
    std::printf("| %s (%d) | %.2f | %d x %d | %.2f | %s | %s |\n", e.graph.c_str(),
                in.graph->num_nodes(), best.seconds, best.plan->num_ranks, best.plan->num_replicas,
                best.plan->step_seconds * 1e3, versus(pipeline, true).c_str(),
                versus(data, false).c_str());
    std::fflush(stdout);
  }
}

int Main(int argc, char** argv) {
  PlanOptions base{.method = PartitionMethod::kAuto};
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--method") {
      auto m = ParsePartitionMethod(value);
      if (!m.ok()) {
        std::cerr << m.status() << "\n";
        return 2;
      }
      base.method = *m;
    } else if (flag == "--time-limit") {
      (void)absl::SimpleAtod(value, &base.time_limit_seconds);
    } else if (flag == "--only") {
      only = value;
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  const std::string data = std::string(PIPEPLAN_SOURCE_DIR) + "/tests/data/";
  const std::string bench = "/tmp/pipeplan_search_bench/";
  const std::string cmd = "python3 " + std::string(PIPEPLAN_SOURCE_DIR) +
                          "/scripts/gen_example_graphs.py --bench-dir " + bench;
  if (std::system(cmd.c_str()) != 0) {
    std::cerr << "could not generate the benchmark inputs\n";
    return 1;
  }
  std::printf("method %s, time limit %.0f s, AdamW in bf16-mixed, DIRECT communication\n\n",
              std::string(PartitionMethodName(base.method)).c_str(),
              base.time_limit_seconds > 0 ? base.time_limit_seconds : 10.0);
  if (only != "scale") Table(data, bench, base);
  if (only != "table") Scale(bench, base);
  return 0;
}

}  // namespace
}  // namespace pipeplan

int main(int argc, char** argv) { return pipeplan::Main(argc, argv); }
