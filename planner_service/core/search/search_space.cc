#include "search_space.h"

#include <algorithm>
#include <cstdint>
#include <functional>

namespace pipeplan::search {

using schedule::ScheduleKind;

std::vector<Shape> ShapesToTry(const Graph& split_graph, const Cluster& cluster,
                               const PlanOptions& o) {
  const int devices = cluster.num_devices();
  const int deepest = o.num_ranks > 0 ? o.num_ranks : std::min(devices, split_graph.num_nodes());
  std::vector<Shape> out;
  for (int p = o.num_ranks > 0 ? o.num_ranks : 1; p <= deepest; ++p) {
    int widest = devices / p;
    if (o.max_replicas > 0) widest = std::min(widest, o.max_replicas);
    for (int d = o.num_replicas > 0 ? o.num_replicas : 1; d <= widest; ++d) {
      if (o.global_batch > 0 && o.global_batch % d != 0) continue;
      if (o.global_batch > 0 && o.microbatches > 0 && (o.global_batch / d) % o.microbatches != 0) {
        continue;
      }
      out.push_back({p, d});
      if (o.num_replicas > 0) break;
    }
  }
  return out;
}

std::vector<ScheduleKind> KindsToTry(const PlanOptions& o) {
  if (o.schedule) return {*o.schedule};
  // The common default first, so it is planned before any time runs out.
  return {ScheduleKind::k1F1B,
          ScheduleKind::kInterleaved1F1B,
          ScheduleKind::kInterleavedZeroBubble,
          ScheduleKind::kZBVZeroBubble,
          ScheduleKind::kDualPipeV,
          ScheduleKind::kGPipe};
}

int ChunksPerRank(ScheduleKind kind, const PlanOptions& o) {
  return schedule::StagesPerRank(kind,
                                 o.chunks_per_rank > 0 ? o.chunks_per_rank : kDefaultChunksPerRank);
}

std::vector<int> MicrobatchesToTry(const PlanOptions& o, int ranks, int replicas) {
  if (o.microbatches > 0) return {o.microbatches};
  if (o.global_batch <= 0) {
    // Costs are per microbatch and the batch is open: more microbatches only
    // shrink the bubble while adding work, so use the usual 4 per rank.
    return {4 * ranks};
  }
  // Every divisor of the replica's batch: the count the batch allows is
  // the only limit. More microbatches shrink the bubble and the activations
  // in flight; fewer pay less per-transfer latency. Memory decides which fit.
  const int batch = o.global_batch / replicas;
  std::vector<int> small, large;
  for (int m = 1; int64_t{m} * m <= batch; ++m) {
    if (batch % m != 0) continue;
    small.push_back(m);
    if (m != batch / m) large.push_back(batch / m);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

double ShapeLowerBound(const Graph& graph, const Cluster& cluster, const PlanOptions& options,
                       const Shape& shape) {
  double work = 0;  // seconds of one graph-batch microbatch on the fastest device
  for (int v = 0; v < graph.num_nodes(); ++v) {
    const NodeSpec& n = graph.node(v);
    work += n.forward_seconds ? *n.forward_seconds : n.forward_flops / cluster.max_flops();
    work +=
        n.backward_seconds ? *n.backward_seconds : graph.backward_flops(v) / cluster.max_flops();
  }
  std::vector<double> speed;
  for (int d = 0; d < cluster.num_devices(); ++d) {
    speed.push_back(cluster.device(d).flops / cluster.max_flops());
  }
  std::sort(speed.begin(), speed.end(), std::greater<>());
  double capacity = 0;
  for (int i = 0; i < shape.ranks * shape.replicas; ++i) capacity += speed[i];
  // A step trains global_batch samples (or m x replicas graph batches, and
  // the unit is one graph batch): the slowest replica has at most the mean
  // capacity and its share of the work.
  const bool same_samples = options.global_batch > 0 && graph.batch_size() > 0;
  const double batches = same_samples ? options.global_batch / graph.batch_size() : 1;
  return batches * work / capacity;
}

}  // namespace pipeplan::search
