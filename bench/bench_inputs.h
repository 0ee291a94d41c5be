// What the planner benchmarks share: the bundled example graph and cluster
// files (protobuf JSON) read into planner inputs. A benchmark that cannot
// read its inputs has nothing to measure, so these exit(1) with the error.
#ifndef PIPEPLAN_BENCH_BENCH_INPUTS_H_
#define PIPEPLAN_BENCH_BENCH_INPUTS_H_

#include <memory>
#include <string>

#include "pipeplan/core/cluster.h"
#include "pipeplan/core/graph.h"

namespace pipeplan::bench {

struct Loaded {
  std::unique_ptr<Graph> graph;
  std::unique_ptr<Cluster> cluster;
};

// The graph and cluster at these paths, as PlanInputs::FromRequest reads them.
Loaded Load(const std::string& graph_path, const std::string& cluster_path);

}  // namespace pipeplan::bench

#endif  // PIPEPLAN_BENCH_BENCH_INPUTS_H_
