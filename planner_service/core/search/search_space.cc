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

namespace {

// Nodes whose ancestors BoundInputs sums: the heaviest dominate the bound.
constexpr size_t kHeavyNodes = 8;

// The work of node v and every node it depends on.
double WithAncestors(const Graph& graph, const std::vector<double>& work, int v,
                     std::vector<char>& seen) {
  std::fill(seen.begin(), seen.end(), 0);
  std::vector<int> stack = {v};
  seen[v] = 1;
  double sum = 0;
  while (!stack.empty()) {
    const int u = stack.back();
    stack.pop_back();
    sum += work[u];
    for (int e : graph.in_edges(u)) {
      const int src = graph.edge(e).src;
      if (!seen[src]) {
        seen[src] = 1;
        stack.push_back(src);
      }
    }
  }
  return sum;
}

void AddHeavyNodes(const Graph& graph, const std::vector<double>& work, BoundInputs& in) {
  std::vector<int> order(graph.num_nodes());
  for (int v = 0; v < graph.num_nodes(); ++v) order[v] = v;
  const size_t heavy = std::min(order.size(), kHeavyNodes);
  std::partial_sort(order.begin(), order.begin() + heavy, order.end(),
                    [&](int a, int b) { return work[a] > work[b]; });
  std::vector<char> seen(graph.num_nodes());
  for (size_t i = 0; i < heavy; ++i) {
    in.heavy.push_back({work[order[i]], WithAncestors(graph, work, order[i], seen)});
  }
}

}  // namespace

BoundInputs MakeBoundInputs(const Graph& graph, const Cluster& cluster,
                            const PlanOptions& options) {
  BoundInputs in;
  std::vector<double> work(graph.num_nodes());
  for (int v = 0; v < graph.num_nodes(); ++v) {
    const NodeSpec& n = graph.node(v);
    const double forward =
        n.forward_seconds ? *n.forward_seconds : n.forward_flops / cluster.max_flops();
    const double backward =
        n.backward_seconds ? *n.backward_seconds : graph.backward_flops(v) / cluster.max_flops();
    work[v] = forward + backward;
    in.work += work[v];
    in.forward += forward;
    in.backward += backward;
    in.largest = std::max(in.largest, work[v]);
    in.largest_forward = std::max(in.largest_forward, forward);
    in.largest_backward = std::max(in.largest_backward, backward);
    const double input = backward * (1 - graph.weight_grad_fraction(v));
    in.backward_input += input;
    in.largest_backward_input = std::max(in.largest_backward_input, input);
  }
  in.chunks_per_rank =
      options.chunks_per_rank > 0 ? options.chunks_per_rank : kDefaultChunksPerRank;
  AddHeavyNodes(graph, work, in);
  std::vector<double> speed;
  for (int d = 0; d < cluster.num_devices(); ++d) {
    speed.push_back(cluster.device(d).flops / cluster.max_flops());
  }
  std::sort(speed.begin(), speed.end(), std::greater<>());
  in.capacity.assign(speed.size() + 1, 0);
  for (size_t i = 0; i < speed.size(); ++i) in.capacity[i + 1] = in.capacity[i] + speed[i];
  in.same_samples = options.global_batch > 0 && graph.batch_size() > 0;
  in.batches = in.same_samples ? options.global_batch / graph.batch_size() : 1;
  return in;
}

double ShapeLowerBound(const BoundInputs& in, const Shape& shape) {
  // A step trains global_batch samples (or m x replicas graph batches, and
  // the unit is one graph batch): the slowest replica has at most the mean
  // capacity and its share of the work. And some device of every replica
  // runs the largest node on each of the replica's samples: no split or
  // schedule spreads one node, so deep pipelines of few replicas are bound
  // by it however many ranks they have.
  const double capacity = in.capacity[static_cast<size_t>(shape.ranks) * shape.replicas];
  return in.batches * std::max(in.work / capacity, in.largest / shape.replicas);
}

namespace {

// A step of one stage per rank (GPipe, 1F1B) in units of one microbatch's
// work (`in.work`): the fill and drain, the heavy nodes' stages, the round
// trip (search_space.h).
double OneStagePerRank(const BoundInputs& in, int ranks, double m) {
  const double drained = -std::expm1(ranks * std::log1p(-1 / m));  // 1 - (1 - 1/m)^p
  double pipeline = 1 / drained;
  for (const BoundInputs::Heavy& v : in.heavy) {
    pipeline = std::max(pipeline, (v.with_ancestors + (m - 1) * v.work) / in.work);
  }
  const double p = ranks;
  const double stage =
      std::max({in.forward / p, in.backward / p, in.largest_forward, in.largest_backward});
  return std::max(pipeline, 1 + (m - 1) * stage / in.work);
}

// The round trip of any schedule whose stages each run on one rank, one
// action at a time: only the backward's input-gradient part is on a
// microbatch's path (zero-bubble schedules defer the weight gradient).
double RoundTrip(const BoundInputs& in, int stages, double m) {
  const double s = stages;
  const double stage = std::max(
      {in.forward / s, in.backward_input / s, in.largest_forward, in.largest_backward_input});
  return (in.forward + in.backward_input + (m - 1) * stage) / in.work;
}

}  // namespace

double CandidateLowerBound(const BoundInputs& in, const Shape& shape, ScheduleKind kind,
                           int microbatches) {
  const double shape_bound = ShapeLowerBound(in, shape);
  // DualPipeV overlaps a forward and a backward in one action: no stage's
  // actions are known to run one at a time.
  if (kind == ScheduleKind::kDualPipeV || !(in.work > 0)) return shape_bound;
  const double m = microbatches;
  // One microbatch's work: its share of the replica's batch, or one graph
  // batch when the batch is open (the unit is then step / (m x replicas)).
  const double per_microbatch =
      in.same_samples ? in.batches / shape.replicas / m * in.work : in.work;
  const bool one_stage = kind == ScheduleKind::kGPipe || kind == ScheduleKind::k1F1B;
  const int stages = shape.ranks * schedule::StagesPerRank(kind, in.chunks_per_rank);
  const double step =
      per_microbatch * (one_stage ? OneStagePerRank(in, shape.ranks, m) : RoundTrip(in, stages, m));
  const double unit = in.same_samples ? step : step / (m * shape.replicas);
  return std::max(shape_bound, unit);
}

}  // namespace pipeplan::search
