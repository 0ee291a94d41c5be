// Plans a small chain model on two devices with the planning core, in this
// process: what a scheduler linking pipeplan::core does.
#include <cstdio>
#include <string>

#include "pipeplan/core/cluster.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/planner.h"

int main() {
  pipeplan::GraphSpec graph;
  graph.name = "consumer_chain";
  for (int i = 0; i < 8; ++i) {
    pipeplan::NodeSpec node;
    node.id = "layer" + std::to_string(i);
    node.op = "linear";
    node.forward_flops = 1e12 * (1 + i % 3);
    node.param_bytes = 64e6;
    node.output_bytes = 4e6;
    graph.nodes.push_back(node);
    if (i > 0) graph.edges.push_back({"layer" + std::to_string(i - 1), node.id});
  }
  pipeplan::ClusterSpec cluster;
  cluster.devices = {{"gpu0", "host0", 100e12, 40e9}, {"gpu1", "host0", 100e12, 40e9}};

  absl::StatusOr<pipeplan::Graph> g = pipeplan::Graph::Build(graph);
  absl::StatusOr<pipeplan::Cluster> c = pipeplan::Cluster::Build(cluster);
  if (!g.ok() || !c.ok()) {
    std::fprintf(stderr, "bad input: %s %s\n", g.status().ToString().c_str(),
                 c.status().ToString().c_str());
    return 1;
  }
  pipeplan::PlanOptions options;
  options.num_ranks = 2;
  options.microbatches = 4;
  options.schedule = pipeplan::schedule::ScheduleKind::k1F1B;
  absl::StatusOr<pipeplan::PlanResult> plan = pipeplan::MakePlan(*g, *c, options);
  if (!plan.ok()) {
    std::fprintf(stderr, "MakePlan: %s\n", plan.status().ToString().c_str());
    return 1;
  }
  std::printf("in-process: %d ranks, %d microbatches, step %.9g s\n", plan->num_ranks,
              plan->microbatches, plan->step_seconds);
  return plan->num_ranks == 2 && plan->step_seconds > 0 ? 0 : 1;
}
