// Test oracle: enumerates every valid split of a small graph and returns the
// optimum, plus random small instances to compare solvers against it.
#ifndef PIPEPLAN_TESTS_UNIT_CORE_BRUTE_FORCE_H_
#define PIPEPLAN_TESTS_UNIT_CORE_BRUTE_FORCE_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "pipeplan/core/cluster.h"
#include "pipeplan/core/cost_model.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/partition.h"

namespace pipeplan::testing {

struct BruteForceResult {
  // Infinity when no valid split fits in memory.
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> stage_of_node;
  int64_t splits = 0;
};

// Every valid split (edges go forward, no empty stage, every stage within its
// device's memory). Exponential: keep graphs to about 10 nodes.
BruteForceResult BruteForce(const PartitionProblem& problem);

// A test instance: a graph, a cluster, a cost model and a problem over them
// (for MakeRandomInstance a random DAG, a chain when `chain`, on `stages`
// devices). Owns everything the problem points to.
struct RandomInstance {
  std::unique_ptr<Graph> graph;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<CostModel> cost;
  PartitionProblem problem;
};

struct RandomInstanceOptions {
  int nodes = 8;
  int stages = 3;
  bool chain = false;
  bool heterogeneous = false;  // devices of different speeds and links
  bool tight_memory = false;   // memory caps that bind
  bool tied_params = false;
  CommModel comm = CommModel::kDirect;
};

RandomInstance MakeRandomInstance(uint32_t seed, const RandomInstanceOptions& options);

// A problem over `stages` stages of `cost`: stage j on device j with
// `stages - j` microbatches in flight (1F1B's warm-up). `cost` must outlive it.
PartitionProblem PipelineProblem(const CostModel& cost, int stages);

// An instance from given specs (which must build): PipelineProblem with one
// stage per device of `cluster`.
RandomInstance MakeInstance(GraphSpec graph, ClusterSpec cluster, const CostOptions& cost);

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_UNIT_CORE_BRUTE_FORCE_H_
