// Fixed global batch at any scale. Three tables:
//  - gpt2: a GPT-2-XL-sized graph (scripts/gen_example_graphs.py) on 8 to
//    2,048 H100s (8 per host) at a fixed global batch: chosen ranks x
//    replicas x microbatches, step, exposed all-reduce, planning seconds.
//  - piper BERT-32 and piper GNMT: Piper's profiled instances (NeurIPS'21,
//    /work/shared/data/piper, converted by scripts/piper_to_graph.py; SGD in
//    fp32 so weights + gradients = Piper's memoryUsageB) at their own batch
//    (mbsInBatch units: 1,920 and 256) on 2 to 2,048 devices of 80 GB at
//    25 GB/s, 1F1B (Piper's schedule): the search's plan (MakePlan, method
//    dp, 1F1B) against the exact DP x PP optimum under the same cost model.
//    The optimum is a branch and bound over every (ranks, replicas,
//    microbatches) with replicas dividing the batch, ranks x replicas <=
//    devices and microbatches dividing the replica's share, each split with
//    ideal_dp (the exact bottleneck split over the graph's lattice of
//    ideals) and simulated with 1F1B and the bucketed all-reduce. Each
//    candidate has a lower bound no plan of it beats: the search's own
//    (search_space.h: the work over the devices, the largest node, the
//    pipeline's fill and drain, the heaviest nodes' stages, a microbatch's
//    round trip; GlobalBatchTest.PruningBoundsNeverExceedAPlan* check them
//    against every plan of small instances), the replica's work over its
//    ranks and one unit's critical path. Candidates are planned in the
//    order of their bounds until the next bound reaches the best step
//    found, which no later candidate can then beat: the optimum is exact
//    (no tolerance), "plans scored" is how many were planned and
//    "optimum (s)" how long that took.
//    "work bound" is the larger of batch x work / devices and one unit's
//    forward plus backward critical path: no plan beats it, with any
//    replica count per stage, so optimum / bound caps what per-stage
//    replica counts could gain over uniform ones.
//
//   ./build/bench/pipeplan-gbatch-bench [--only gpt2|piper] [--piper FILE] [--devices N]
//                                       [--time-limit S]
//
// --piper FILE: one Piper instance instead of the two bundled ones.
// --devices N: only the rows of N devices (for profiling one scale).
// --time-limit S: the search's time limit (default the planner's 10 s;
//   raise it under a profiler so the search is not cut short).
// "plan (s)" is wall time, "CPU (s)" the planning thread's CPU time: on a
// shared machine the wall time follows the load, the CPU time much less.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench_inputs.h"
#include "pipeplan/core/planner.h"
#include "search_space.h"

namespace pipeplan {
namespace {

using bench::Load;
using bench::Loaded;

Cluster Devices(int n, double flops, double memory, double inter, double intra, double latency) {
  ClusterSpec c{.intra_host_bandwidth = intra,
                .inter_host_bandwidth = inter,
                .intra_host_latency = latency,
                .inter_host_latency = latency};
  for (int i = 0; i < n; ++i) {
    c.devices.push_back({absl::StrCat("gpu", i), absl::StrCat("host", i / 8), flops, memory});
  }
  return *Cluster::Build(std::move(c));
}

int only_devices = 0;   // --devices: 0 is every row
double time_limit = 0;  // --time-limit: 0 is the planner's default

bool Skip(int n) { return only_devices > 0 && n != only_devices; }

double Seconds(absl::Time t0) { return absl::ToDoubleSeconds(absl::Now() - t0); }

// This thread's CPU seconds so far (the planner runs on the caller's thread).
double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

void Gpt2(const std::string& bench_dir, const std::string& data) {
  Loaded in = Load(bench_dir + "gpt2_xl.json", data + "cluster_8xa100.json");
  const int batch = 512;
  std::printf("gpt2_xl (%d nodes), global batch %d sequences, AdamW bf16-mixed, method dp\n\n",
              in.graph->num_nodes(), batch);
  std::printf(
      "| devices | ranks x replicas x microbatches | schedule | step (ms) | exposed "
      "all-reduce (ms) | plan (s) | CPU (s) |\n|---|---|---|---|---|---|---|\n");
  for (int n = 8; n <= 2048; n *= 2) {
    if (Skip(n)) continue;
    const Cluster c = Devices(n, 4e14, 80.0 * (1 << 30), 50e9, 450e9, 10e-6);
    const PlanOptions o{
        .global_batch = batch, .method = PartitionMethod::kDp, .time_limit_seconds = time_limit};
    const absl::Time t0 = absl::Now();
    const double cpu0 = CpuSeconds();
    auto p = MakePlan(*in.graph, c, o);
    const double cpu = CpuSeconds() - cpu0;
    if (!p.ok()) {
      std::printf("| %d | %s |\n", n, std::string(p.status().message()).substr(0, 160).c_str());
      continue;
    }
    std::printf("| %d | %d x %d x %d | %s | %.2f | %.2f | %.2f | %.2f |\n", n, p->num_ranks,
                p->num_replicas, p->microbatches,
                std::string(schedule::ScheduleKindName(p->schedule)).c_str(), p->step_seconds * 1e3,
                p->allreduce_exposed_seconds * 1e3, Seconds(t0), cpu);
    std::fflush(stdout);
  }
}

struct Best {
  double step = 1e300;
  int ranks = 0, replicas = 0, microbatches = 0;
  int plans = 0;
  double seconds = 0;  // wall time of the enumeration
};

std::vector<int> Divisors(int b) {
  std::vector<int> out;
  for (int d = 1; d <= b; ++d) {
    if (b % d == 0) out.push_back(d);
  }
  return out;
}

struct Bounded {
  double bound = 0;
  int ranks = 0, replicas = 0, microbatches = 0;
};

// Every (ranks, replicas, microbatches) of the batch on the cluster, with a
// bound no plan of it beats: the search's own (search_space.h, checked
// against every plan of small instances by GlobalBatchTest.PruningBounds*),
// the replica's share of the work over its ranks, and one unit's critical
// path (`chain`). Ascending by bound.
std::vector<Bounded> BoundedCandidates(const Graph& g, const Cluster& c, const PlanOptions& o,
                                       double work, double chain) {
  const int batch = o.global_batch;
  const search::BoundInputs in = search::MakeBoundInputs(g, c, o);
  std::vector<Bounded> out;
  for (int p = 1; p <= std::min(c.num_devices(), g.num_nodes()); ++p) {
    for (int r : Divisors(batch)) {
      if (p * r > c.num_devices()) continue;
      for (int m : Divisors(batch / r)) {
        const double own = std::max(batch * work / (p * r), chain);
        const double searched = search::CandidateLowerBound(in, {p, r}, *o.schedule, m);
        out.push_back({std::max(own, searched), p, r, m});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const Bounded& a, const Bounded& b) {
    return std::tie(a.bound, a.ranks, a.replicas, a.microbatches) <
           std::tie(b.bound, b.ranks, b.replicas, b.microbatches);
  });
  return out;
}

// The exact optimum over (ranks, replicas, microbatches), 1F1B, ideal_dp
// splits, by branch and bound: candidates are planned in the order of their
// bounds, and the enumeration stops at the first whose bound reaches the
// best step found (it and every later one cannot be strictly faster).
Best Exhaustive(const Graph& g, const Cluster& c, int batch, double work, double chain) {
  PlanOptions o{.global_batch = batch,
                .optimizer = Optimizer::kSgd,
                .precision = Precision::kFp32,
                .schedule = schedule::ScheduleKind::k1F1B,
                .method = PartitionMethod::kIdealDp};
  Best best;
  for (const Bounded& cand : BoundedCandidates(g, c, o, work, chain)) {
    if (cand.bound >= best.step) break;
    o.num_ranks = cand.ranks;
    o.num_replicas = cand.replicas;
    o.microbatches = cand.microbatches;
    auto p = MakePlan(g, c, o);
    ++best.plans;
    if (p.ok() && p->step_seconds < best.step) {
      best = {p->step_seconds, cand.ranks, cand.replicas, cand.microbatches, best.plans};
    }
  }
  return best;
}

// The longest path of one unit's forward (or backward) seconds through the
// graph: its nodes that depend on each other run one after another.
double CriticalPath(const Graph& g, bool forward) {
  std::vector<double> done(g.num_nodes(), 0);
  double longest = 0;
  for (int v : g.topo_order()) {
    double start = 0;
    for (int e : g.in_edges(v)) start = std::max(start, done[g.edge(e).src]);
    const NodeSpec& node = g.node(v);
    done[v] = start + (forward ? *node.forward_seconds : *node.backward_seconds);
    longest = std::max(longest, done[v]);
  }
  return longest;
}

struct PiperInstance {
  std::string name;
  std::string graph;  // converted
  int batch = 0;      // mbsInBatch
};

// Converts Piper's JSON with scripts/piper_to_graph.py, which prints the
// instance's batch.
std::optional<PiperInstance> ConvertPiper(const std::string& src, const std::string& file,
                                          const std::string& out) {
  const std::string cmd = "python3 " + src + "/scripts/piper_to_graph.py " + file + " " + out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  int batch = 0;
  const bool read = std::fscanf(pipe, "%d", &batch) == 1;
  if (pclose(pipe) != 0 || !read || batch <= 0) return std::nullopt;
  std::string name = file.substr(file.find_last_of('/') + 1);
  return PiperInstance{name.substr(0, name.find('.')), out, batch};
}

void Piper(const PiperInstance& instance, const std::string& data) {
  Loaded in = Load(instance.graph, data + "cluster_8xa100.json");
  const Graph& g = *in.graph;
  const int batch = instance.batch;
  double work = 0;  // seconds of one unit over every node
  for (int v = 0; v < g.num_nodes(); ++v) {
    work += *g.node(v).forward_seconds + *g.node(v).backward_seconds;
  }
  const double chain = CriticalPath(g, true) + CriticalPath(g, false);
  std::printf("\nPiper %s (%d nodes), batch %d units, 1F1B, SGD fp32, 80 GB, 25 GB/s\n\n",
              instance.name.c_str(), g.num_nodes(), batch);
  std::printf(
      "| devices | search: ranks x replicas x microbatches | step (s) | exposed "
      "all-reduce (s) | plan (s) | CPU (s) | optimum: ranks x replicas x microbatches | step (s) | "
      "plans scored | optimum (s) | search / optimum | work bound (s) | optimum / bound |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int n = 2; n <= 2048; n *= 2) {
    if (Skip(n)) continue;
    const Cluster c = Devices(n, 1e14, 80e9, 25e9, 25e9, 1e-9);
    const PlanOptions o{.global_batch = batch,
                        .optimizer = Optimizer::kSgd,
                        .precision = Precision::kFp32,
                        .schedule = schedule::ScheduleKind::k1F1B,
                        .method = PartitionMethod::kDp,
                        .time_limit_seconds = time_limit};
    const absl::Time t0 = absl::Now();
    const double cpu0 = CpuSeconds();
    auto p = MakePlan(g, c, o);
    const double plan_seconds = Seconds(t0);
    const double plan_cpu = CpuSeconds() - cpu0;
    const absl::Time t1 = absl::Now();
    Best opt = Exhaustive(g, c, batch, work, chain);
    opt.seconds = Seconds(t1);
    // No plan, whatever its replicas per stage, beats the batch's work
    // spread over every device with no bubble, transfer or all-reduce, nor
    // one unit's forward and backward critical paths (a unit is not split).
    const double bound = std::max(batch * work / n, chain);
    if (!p.ok()) {
      std::printf("| %d | %s | | | | %d x %d x %d | %.4f | | |\n", n,
                  std::string(p.status().message()).substr(0, 120).c_str(), opt.ranks, opt.replicas,
                  opt.microbatches, opt.step);
      continue;
    }
    std::printf(
        "| %d | %d x %d x %d | %.4f | %.4f | %.3f | %.3f | %d x %d x %d | %.4f | %d | %.1f | %.4f "
        "| "
        "%.4f | %.4f |\n",
        n, p->num_ranks, p->num_replicas, p->microbatches, p->step_seconds,
        p->allreduce_exposed_seconds, plan_seconds, plan_cpu, opt.ranks, opt.replicas,
        opt.microbatches, opt.step, opt.plans, opt.seconds, p->step_seconds / opt.step, bound,
        opt.step / bound);
    std::fflush(stdout);
  }
}

int Main(int argc, char** argv) {
  std::string only;
  std::vector<std::string> piper = {"/work/shared/data/piper/bert32a100.json",
                                    "/work/shared/data/piper/gnmt.json"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--only") {
      only = argv[i + 1];
    } else if (flag == "--piper") {
      piper = {argv[i + 1]};
    } else if (flag == "--devices") {
      only_devices = std::atoi(argv[i + 1]);
    } else if (flag == "--time-limit") {
      time_limit = std::atof(argv[i + 1]);
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  const std::string src = PIPEPLAN_SOURCE_DIR;
  const std::string dir = "/tmp/pipeplan_gbatch_bench/";
  const std::string cmd = "python3 " + src + "/scripts/gen_example_graphs.py --bench-dir " + dir;
  if (std::system(cmd.c_str()) != 0) {
    std::cerr << "could not generate the benchmark inputs\n";
    return 1;
  }
  if (only != "piper") Gpt2(dir, src + "/tests/data/");
  if (only == "gpt2") return 0;
  for (size_t i = 0; i < piper.size(); ++i) {
    const auto instance = ConvertPiper(src, piper[i], dir + "piper" + std::to_string(i) + ".json");
    if (!instance) {
      std::cerr << "could not convert " << piper[i] << "\n";
      return 1;
    }
    Piper(*instance, src + "/tests/data/");
  }
  return 0;
}

}  // namespace
}  // namespace pipeplan

int main(int argc, char** argv) { return pipeplan::Main(argc, argv); }
