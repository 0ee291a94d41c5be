// Partitioning benchmark: the bundled example graphs x {2, 4, 8, 16} stages on
// the two-host H100 cluster, every method pipeplan has, plus a synthetic
// transformer of 100K nodes. Prints one row per (graph, stages, method) with
// the objective (bottleneck seconds per microbatch), the proven lower bound,
// the gap and the median solve time over --repeats runs.
//
//   ./build/bench/pipeplan-plan-bench [--repeats 5] [--gap 0.01] [--big-nodes 100000]
//                                     [--graphs gpt_1k,gpt_4k,resnet50,inception_like]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench_inputs.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/core/solve_partition.h"

namespace pipeplan {
namespace {

using bench::Load;
using bench::Loaded;

void Row(const std::string& graph, int nodes, int k, PartitionMethod method, const Loaded& in,
         int repeats, double gap, double time_limit) {
  CostModel cost(*in.graph, *in.cluster, {.optimizer_state_multiplier = 0});
  const int m = 4 * k;
  PartitionProblem problem{.cost = &cost, .relative_gap = gap};
  for (int j = 0; j < k; ++j) {
    problem.stage_device.push_back(j);
    problem.stage_inflight.push_back(std::min(m, k - j));  // 1F1B
  }
  std::vector<double> seconds;
  absl::StatusOr<PlanResult> result;
  for (int r = 0; r < repeats; ++r) {
    problem.deadline = absl::Now() + absl::Seconds(time_limit);
    const absl::Time t0 = absl::Now();
    result = SolvePartition(problem, method);
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  if (!result.ok()) {
    std::printf("%-16s %7d %3d %-9s %s\n", graph.c_str(), nodes, k,
                std::string(PartitionMethodName(method)).c_str(),
                std::string(result.status().message()).substr(0, 80).c_str());
    return;
  }
  std::printf("%-16s %7d %3d %-9s %-9s %12.6f %12.6f %8.4f%% %10.4f\n", graph.c_str(), nodes, k,
              std::string(PartitionMethodName(method)).c_str(), result->method.c_str(),
              result->partition.objective * 1e3, result->lower_bound * 1e3, 100 * result->gap,
              median);
  std::fflush(stdout);
}

// Solve time at scale: a synthetic transformer of `big_nodes` nodes.
int BigGraphRows(int big_nodes, const std::string& data, int repeats, double gap,
                 double time_limit) {
  const std::string path = "/tmp/pipeplan_bench_synthetic.json";
  const std::string cmd = "python3 " + std::string(PIPEPLAN_SOURCE_DIR) +
                          "/scripts/gen_example_graphs.py --synthetic-transformer " +
                          std::to_string(big_nodes) + " --hidden 512 --out " + path + " >/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    std::cerr << "could not generate the synthetic graph\n";
    return 1;
  }
  // The synthetic model is far larger than 16 real GPUs hold; these rows
  // measure solve time at scale, so memory is left unconstrained.
  Loaded in = Load(path, data + "cluster_2x8_h100.json");
  ClusterSpec roomy;
  for (int d = 0; d < in.cluster->num_devices(); ++d) {
    DeviceSpec dev = in.cluster->device(d);
    dev.memory_bytes = 1e18;
    roomy.devices.push_back(dev);
  }
  roomy.inter_host_bandwidth = in.cluster->bandwidth(0, in.cluster->num_devices() - 1);
  in.cluster = std::make_unique<Cluster>(*Cluster::Build(roomy));
  for (int k : {8, 16}) {
    for (PartitionMethod method : {PartitionMethod::kAuto, PartitionMethod::kDp}) {
      Row("synthetic", in.graph->num_nodes(), k, method, in, std::min(repeats, 3), gap, time_limit);
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  int repeats = 5;
  double gap = 0.01;
  double time_limit = 10;
  int big_nodes = 100000;
  std::vector<std::string> graphs = {"gpt_1k", "gpt_4k", "resnet50", "inception_like"};
  std::vector<PartitionMethod> methods = {PartitionMethod::kAuto, PartitionMethod::kDp,
                                          PartitionMethod::kIdealDp, PartitionMethod::kTime};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--repeats") {
      (void)absl::SimpleAtoi(value, &repeats);
    } else if (flag == "--gap") {
      (void)absl::SimpleAtod(value, &gap);
    } else if (flag == "--time-limit") {
      (void)absl::SimpleAtod(value, &time_limit);
    } else if (flag == "--big-nodes") {
      (void)absl::SimpleAtoi(value, &big_nodes);
    } else if (flag == "--graphs") {
      graphs = absl::StrSplit(value, ',');
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return 2;
    }
  }
  const std::string data = std::string(PIPEPLAN_SOURCE_DIR) + "/tests/data/";
  std::printf(
      "cluster: 2 hosts x 8 H100 (tests/data/cluster_2x8_h100.json); 1F1B memory, "
      "m = 4k; relative gap target %.2g; times are medians of %d runs\n",
      gap, repeats);
  std::printf("%-16s %7s %3s %-9s %-9s %12s %12s %9s %10s\n", "graph", "nodes", "k", "method",
              "chosen", "obj (ms)", "bound (ms)", "gap", "solve (s)");
  for (const std::string& name : graphs) {
    Loaded in = Load(data + name + ".json", data + "cluster_2x8_h100.json");
    for (int k : {2, 4, 8, 16}) {
      for (PartitionMethod method : methods) {
        Row(name, in.graph->num_nodes(), k, method, in, repeats, gap, time_limit);
      }
    }
  }
  if (big_nodes > 0) return BigGraphRows(big_nodes, data, repeats, gap, time_limit);
  return 0;
}

}  // namespace
}  // namespace pipeplan

int main(int argc, char** argv) { return pipeplan::Main(argc, argv); }
