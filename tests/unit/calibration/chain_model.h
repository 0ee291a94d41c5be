// A chain of equal nodes on four devices of one host at 1 TFLOP/s: the
// model the as-run and spread tests price plans on.
#ifndef PIPEPLAN_TESTS_UNIT_CALIBRATION_CHAIN_MODEL_H_
#define PIPEPLAN_TESTS_UNIT_CALIBRATION_CHAIN_MODEL_H_

#include <string>

#include "pipeplan/core/cluster.h"
#include "pipeplan/core/graph.h"

namespace pipeplan {

struct ChainModel {
  Graph graph;
  Cluster cluster;
};

// `nodes` nodes of `flops` and `param_bytes` each, 1 KB between them, on
// devices d0..d3 of host "h" of `links` (its devices are replaced).
inline ChainModel ChainOnOneHost(int nodes, double flops, double param_bytes = 0,
                                 ClusterSpec links = {}, double batch_size = 0) {
  GraphSpec g{.name = "chain", .batch_size = batch_size};
  for (int i = 0; i < nodes; ++i) {
    g.nodes.push_back({.id = "n" + std::to_string(i),
                       .forward_flops = flops,
                       .param_bytes = param_bytes,
                       .output_bytes = 1e3});
    if (i > 0) g.edges.push_back({.src = g.nodes[i - 1].id, .dst = g.nodes[i].id});
  }
  links.devices.clear();
  for (int d = 0; d < 4; ++d) {
    links.devices.push_back(
        {.id = "d" + std::to_string(d), .host = "h", .flops = 1e12, .memory_bytes = 1e12});
  }
  return {*Graph::Build(g), *Cluster::Build(links)};
}

}  // namespace pipeplan

#endif  // PIPEPLAN_TESTS_UNIT_CALIBRATION_CHAIN_MODEL_H_
