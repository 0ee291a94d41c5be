#include "brute_force.h"

#include <random>
#include <string>

#include "absl/strings/str_cat.h"

namespace pipeplan::testing {
namespace {

void Enumerate(const PartitionProblem& problem, const std::vector<int>& order, size_t i,
               std::vector<int>& stage, BruteForceResult& result) {
  const Graph& g = problem.graph();
  const int k = problem.num_stages();
  if (i == order.size()) {
    ++result.splits;
    auto p = MakePartition(problem, stage);
    if (!p.ok() || !p->fits_memory) return;  // empty stage or over memory
    if (p->objective < result.best) {
      result.best = p->objective;
      result.stage_of_node = stage;
    }
    return;
  }
  const int v = order[i];
  int lo = 0;
  for (int e : g.in_edges(v)) lo = std::max(lo, stage[g.edge(e).src]);
  for (int s = lo; s < k; ++s) {
    stage[v] = s;
    Enumerate(problem, order, i + 1, stage, result);
  }
  stage[v] = -1;
}

}  // namespace

BruteForceResult BruteForce(const PartitionProblem& problem) {
  BruteForceResult result;
  const Graph& g = problem.graph();
  std::vector<int> order(g.topo_order().begin(), g.topo_order().end());
  std::vector<int> stage(g.num_nodes(), -1);
  Enumerate(problem, order, 0, stage, result);
  return result;
}

RandomInstance MakeRandomInstance(uint32_t seed, const RandomInstanceOptions& options) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  GraphSpec spec;
  spec.name = absl::StrCat("random", seed);
  for (int v = 0; v < options.nodes; ++v) {
    NodeSpec n;
    n.id = absl::StrCat("n", v);
    n.forward_flops = 1e12 * (0.05 + unit(rng));
    n.param_bytes = unit(rng) < 0.7 ? 1e9 * unit(rng) : 0;
    n.output_bytes = 1e8 * (0.05 + unit(rng));
    n.activation_bytes = 1e9 * unit(rng);
    if (options.tied_params && n.param_bytes > 0 && unit(rng) < 0.3) n.param_key = "tied";
    spec.nodes.push_back(n);
  }
  for (int v = 1; v < options.nodes; ++v) {
    if (options.chain) {
      spec.edges.push_back({absl::StrCat("n", v - 1), absl::StrCat("n", v), 0});
      continue;
    }
    // Every node but the first has a predecessor; some get a second one or a
    // skip connection, so the graph is a DAG with branches.
    std::uniform_int_distribution<int> pick(0, v - 1);
    const int a = std::max(0, v - 1 - static_cast<int>(unit(rng) * 3));
    spec.edges.push_back({absl::StrCat("n", a), absl::StrCat("n", v), 0});
    if (unit(rng) < 0.4) {
      const int b = pick(rng);
      if (b != a) spec.edges.push_back({absl::StrCat("n", b), absl::StrCat("n", v), 0});
    }
  }
  ClusterSpec cs;
  for (int d = 0; d < options.stages; ++d) {
    DeviceSpec dev;
    dev.id = absl::StrCat("gpu", d);
    dev.host = options.heterogeneous ? absl::StrCat("host", d / 2) : "host0";
    dev.flops = options.heterogeneous ? 1e14 * (0.5 + unit(rng)) : 1e14;
    dev.memory_bytes = options.tight_memory ? 4e9 + 4e9 * unit(rng) : 1e12;
    cs.devices.push_back(dev);
  }
  cs.intra_host_bandwidth = 1e10;
  cs.inter_host_bandwidth = 2e9;
  CostOptions co;
  co.comm_model = options.comm;
  co.optimizer_state_multiplier = 2;
  return MakeInstance(std::move(spec), std::move(cs), co);
}

PartitionProblem PipelineProblem(const CostModel& cost, int stages) {
  PartitionProblem p;
  p.cost = &cost;
  for (int j = 0; j < stages; ++j) {
    p.stage_device.push_back(j);
    p.stage_inflight.push_back(stages - j);
  }
  return p;
}

RandomInstance MakeInstance(GraphSpec graph, ClusterSpec cluster, const CostOptions& cost) {
  const int stages = static_cast<int>(cluster.devices.size());
  RandomInstance inst;
  inst.graph = std::make_unique<Graph>(*Graph::Build(std::move(graph)));
  inst.cluster = std::make_unique<Cluster>(*Cluster::Build(std::move(cluster)));
  inst.cost = std::make_unique<CostModel>(*inst.graph, *inst.cluster, cost);
  inst.problem = PipelineProblem(*inst.cost, stages);
  return inst;
}

}  // namespace pipeplan::testing
