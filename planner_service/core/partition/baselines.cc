// Baseline partitioners, the way people split models by hand or with a
// one-shot heuristic: equal node counts, equal parameter bytes, and the
// time-balanced block partition of torchgpipe's balance_by_time and
// DeepSpeed's partition_balanced (min-max over compute only). All cut the
// graph's topological order into contiguous blocks, so every split is valid;
// none looks at communication or memory.
#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/core/partition.h"

namespace pipeplan {
namespace {

// Turns block boundaries over the topological order into a stage per node.
std::vector<int> StagesFromCuts(const Graph& g, const std::vector<int>& cuts) {
  std::vector<int> stage(g.num_nodes());
  for (size_t j = 0; j + 1 < cuts.size(); ++j) {
    for (int i = cuts[j]; i < cuts[j + 1]; ++i) stage[g.topo_order()[i]] = static_cast<int>(j);
  }
  return stage;
}

// Cuts the sequence `weight` into k non-empty blocks, each cut placed where
// the prefix sum first reaches j/k of the total.
std::vector<int> ProportionalCuts(const std::vector<double>& weight, int k) {
  const int n = static_cast<int>(weight.size());
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weight[i];
  std::vector<int> cuts = {0};
  for (int j = 1; j < k; ++j) {
    const double target = prefix[n] * j / k;
    int c =
        static_cast<int>(std::lower_bound(prefix.begin(), prefix.end(), target) - prefix.begin());
    // Keep every block non-empty.
    c = std::clamp(c, cuts.back() + 1, n - (k - j));
    cuts.push_back(c);
  }
  cuts.push_back(n);
  return cuts;
}

// The time-balanced block cut: the least block limit (by binary search) at
// which a greedy fill makes at most k blocks, then the cuts of that fill.
std::vector<int> MinMaxBlockCuts(const std::vector<double>& w, int k) {
  const int n = static_cast<int>(w.size());
  auto blocks_needed = [&](double limit) {
    int blocks = 1;
    double sum = 0;
    for (double x : w) {
      if (sum + x > limit) {
        ++blocks;
        sum = 0;
      }
      sum += x;
    }
    return blocks;
  };
  double lo = *std::max_element(w.begin(), w.end());
  double hi = std::accumulate(w.begin(), w.end(), 0.0);
  for (int it = 0; it < 100 && hi - lo > 1e-12 * hi; ++it) {
    const double mid = (lo + hi) / 2;
    (blocks_needed(mid) <= k ? hi : lo) = mid;
  }
  std::vector<int> cuts = {0};
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const int stages_left = k - static_cast<int>(cuts.size());
    // Cut when the block is full, or when the remaining nodes are just
    // enough to give every later stage one node.
    if (i > cuts.back() && stages_left > 0 && (sum + w[i] > hi || n - i == stages_left)) {
      cuts.push_back(i);
      sum = 0;
    }
    sum += w[i];
  }
  cuts.push_back(n);
  return cuts;
}

// A baseline: weighs each node, in topological order, and cuts the order
// into the problem's number of blocks by those weights.
class BlockPartitioner : public Partitioner {
 public:
  using Weigh = double (*)(const PartitionProblem& problem, int node);
  using Cut = std::vector<int> (*)(const std::vector<double>& weight, int k);
  BlockPartitioner(std::string_view name, Weigh weigh, Cut cut)
      : name_(name), weigh_(weigh), cut_(cut) {}

  std::string_view name() const override { return name_; }
  absl::StatusOr<Partition> Solve(const PartitionProblem& problem) const override {
    if (auto s = ValidateProblem(problem); !s.ok()) return s;
    const Graph& g = problem.graph();
    std::vector<double> weight(g.num_nodes());
    for (int i = 0; i < g.num_nodes(); ++i) weight[i] = weigh_(problem, g.topo_order()[i]);
    return MakePartition(problem, StagesFromCuts(g, cut_(weight, problem.num_stages())));
  }

 private:
  std::string_view name_;
  Weigh weigh_;
  Cut cut_;
};

}  // namespace

std::unique_ptr<Partitioner> MakeUniformPartitioner() {
  return std::make_unique<BlockPartitioner>(
      "uniform", [](const PartitionProblem&, int) -> double { return 1.0; }, ProportionalCuts);
}
std::unique_ptr<Partitioner> MakeParamsPartitioner() {
  return std::make_unique<BlockPartitioner>(
      "params",
      [](const PartitionProblem& p, int node) -> double {
        return p.graph().node(node).param_bytes;
      },
      ProportionalCuts);
}
std::unique_ptr<Partitioner> MakeTimeBlockPartitioner() {
  return std::make_unique<BlockPartitioner>(
      "time", [](const PartitionProblem& p, int node) -> double { return p.cost->work_ref(node); },
      MinMaxBlockCuts);
}

}  // namespace pipeplan
