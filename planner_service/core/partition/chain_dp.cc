// Exact min-max DP over the graph's topological order: binary search on the
// bottleneck with an O(n·k) sliding-window feasibility test; exact for
// chains, a heuristic and warm start for other DAGs. Derivation:
// docs/partitioning.md, "Chain DP".
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/partition.h"

namespace pipeplan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Per-cut tensor traffic over the topological order: bytes[c] and count[c]
// of tensors crossing cut c (between positions c-1 and c).
struct CutTraffic {
  std::vector<double> bytes;
  std::vector<double> count;
};

CutTraffic RelayTraffic(const CostModel& cost) {
  const Graph& g = cost.graph();
  const int n = g.num_nodes();
  std::vector<double> dbytes(n + 2, 0), dcount(n + 2, 0);
  std::vector<std::pair<int, double>> outs;  // (consumer position, bytes)
  for (int v = 0; v < n; ++v) {
    const int p = g.topo_position(v);
    outs.clear();
    for (int e : g.out_edges(v))
      outs.emplace_back(g.topo_position(g.edge(e).dst), cost.edge_bytes(e));
    if (outs.empty()) continue;
    std::sort(outs.begin(), outs.end(), [](auto& x, auto& y) { return x.first > y.first; });
    // Cut c in (p, q] carries the largest bytes among edges to positions >= c.
    double running = 0;
    for (size_t i = 0; i < outs.size(); ++i) {
      running = std::max(running, outs[i].second);
      const int hi = outs[i].first;
      const int lo = i + 1 < outs.size() ? outs[i + 1].first : p;
      if (hi > lo) {
        dbytes[lo + 1] += running;
        dbytes[hi + 1] -= running;
      }
    }
    dcount[p + 1] += 1;
    dcount[outs.front().first + 1] -= 1;
  }
  CutTraffic t;
  t.bytes.assign(n + 1, 0);
  t.count.assign(n + 1, 0);
  double b = 0, c = 0;
  for (int i = 0; i <= n; ++i) {
    b += dbytes[i];
    c += dcount[i];
    t.bytes[i] = std::max(0.0, b);
    t.count[i] = std::max(0.0, std::round(c));
  }
  return t;
}

// Lower-bound traffic for DIRECT: at cut a the stage starting at a receives at
// least the tensors its first node consumes from before a; at cut b the stage
// ending at b sends at least the tensor of its last node if consumed later.
struct DirectBoundTraffic {
  CutTraffic recv, send;
};

DirectBoundTraffic DirectLowerTraffic(const CostModel& cost) {
  const Graph& g = cost.graph();
  const int n = g.num_nodes();
  DirectBoundTraffic t;
  t.recv.bytes.assign(n + 1, 0);
  t.recv.count.assign(n + 1, 0);
  t.send = t.recv;
  absl::flat_hash_map<int, double> by_src;
  for (int c = 1; c < n; ++c) {
    const int first = g.topo_order()[c];
    by_src.clear();
    for (int e : g.in_edges(first)) {
      double& b = by_src[g.edge(e).src];
      b = std::max(b, cost.edge_bytes(e));
    }
    for (const auto& [src, bytes] : by_src) {
      t.recv.bytes[c] += bytes;
      t.recv.count[c] += 1;
    }
    const int last = g.topo_order()[c - 1];
    double out = -1;
    for (int e : g.out_edges(last)) out = std::max(out, cost.edge_bytes(e));
    if (out >= 0) {
      t.send.bytes[c] = out;
      t.send.count[c] = 1;
    }
  }
  return t;
}

bool HasUniqueTopologicalOrder(const Graph& g) {
  // Unique iff consecutive nodes of the order are joined by an edge.
  auto order = g.topo_order();
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    bool joined = false;
    for (int e : g.out_edges(order[i])) {
      if (g.edge(e).dst == order[i + 1]) {
        joined = true;
        break;
      }
    }
    if (!joined) return false;
  }
  return true;
}

class ChainDp {
 public:
  // `memory_scale` multiplies every device's memory (used to find the
  // smallest memory that fits).
  ChainDp(const PartitionProblem& problem) : p_(problem), g_(problem.graph()) {
    const int n = g_.num_nodes();
    prefix_.assign(n + 1, 0);
    for (int i = 0; i < n; ++i) prefix_[i + 1] = prefix_[i] + p_.cost->work_ref(g_.topo_order()[i]);
  }

  // Charges for cut traffic: stage j pays left_[j][a] at its start cut and
  // right_[j][b] at its end cut.
  void SetTraffic(const CutTraffic& recv, const CutTraffic& send, bool fastest_link) {
    const int n = g_.num_nodes();
    const int k = p_.num_stages();
    const Cluster& cl = p_.cost->cluster();
    double best_bw = 0, best_lat = kInf;
    if (fastest_link) {
      for (int a : p_.stage_device) {
        for (int b : p_.stage_device) {
          if (a == b) continue;
          best_bw = std::max(best_bw, cl.bandwidth(a, b));
          best_lat = std::min(best_lat, cl.latency(a, b));
        }
      }
    }
    auto transfer = [&](int da, int db, double bytes, double count) {
      if (da == db || count == 0) return 0.0;
      if (fastest_link) return bytes / best_bw + count * best_lat;
      return bytes / cl.bandwidth(da, db) + count * cl.latency(da, db);
    };
    left_.assign(k, std::vector<double>(n + 1, 0));
    right_.assign(k, std::vector<double>(n + 1, 0));
    for (int j = 0; j < k; ++j) {
      const int d = p_.stage_device[j];
      for (int c = 1; c < n; ++c) {
        if (j > 0) {
          left_[j][c] = 2 * transfer(p_.stage_device[j - 1], d, recv.bytes[c], recv.count[c]);
        }
        if (j + 1 < k) {
          right_[j][c] = 2 * transfer(d, p_.stage_device[j + 1], send.bytes[c], send.count[c]);
        }
      }
    }
  }

  // lo_[j][b]: the smallest start a such that [a, b) fits stage j's memory
  // (b when nothing does). Stages on equal devices with equal in-flight
  // counts share one window.
  void ComputeMemoryWindows(double memory_scale) {
    const int n = g_.num_nodes();
    const int k = p_.num_stages();
    const CostModel& cost = *p_.cost;
    lo_.assign(k, {});
    absl::flat_hash_map<std::pair<double, int>, int> done;
    std::vector<int> group_count(g_.num_param_groups(), 0);
    for (int j = 0; j < k; ++j) {
      const double cap = StageMemoryCap(p_, j) * memory_scale;
      const int inflight = p_.stage_inflight[j];
      if (auto it = done.find({cap, inflight}); it != done.end()) {
        lo_[j] = lo_[it->second];
        continue;
      }
      done[{cap, inflight}] = j;
      std::vector<int>& lo = lo_[j];
      lo.assign(n + 1, 0);
      std::fill(group_count.begin(), group_count.end(), 0);
      double params = 0, acts = 0;
      int a = 0;
      auto add = [&](int v, int sign) {
        acts += sign * cost.activation_bytes(v);
        const int grp = g_.param_group(v);
        if (grp < 0) return;
        if (sign > 0 && group_count[grp]++ == 0) params += g_.param_group_bytes(grp);
        if (sign < 0 && --group_count[grp] == 0) params -= g_.param_group_bytes(grp);
      };
      for (int b = 1; b <= n; ++b) {
        add(g_.topo_order()[b - 1], +1);
        while (a < b && params * cost.param_state_factor() + acts * inflight > cap * (1 + 1e-12)) {
          add(g_.topo_order()[a], -1);
          ++a;
        }
        lo[b] = a;
      }
    }
  }

  // Whether a split with every stage cost <= T exists; with `parents`, records
  // the chosen start of each stage's block.
  bool Feasible(double T, std::vector<std::vector<int>>* parents) {
    const int n = g_.num_nodes();
    const int k = p_.num_stages();
    reach_.assign(n + 1, 0);
    next_.assign(n + 1, 0);
    reach_[0] = 1;
    // A monotone queue of starts (decreasing h) in a flat buffer: each start
    // enters once per stage, so head and tail only move forward.
    window_.resize(n + 1);
    if (parents) parents->assign(k, std::vector<int>(n + 1, -1));
    for (int j = 0; j < k; ++j) {
      const double slow = p_.cost->slowdown(p_.stage_device[j]);
      const std::vector<double>& left = left_[j];
      const std::vector<double>& right = right_[j];
      const std::vector<int>& lo = lo_[j];
      auto h = [&](int a) { return prefix_[a] * slow - left[a]; };
      std::fill(next_.begin(), next_.end(), 0);
      int head = 0, tail = 0;
      bool any = false;
      const int first_b = j + 1;
      const int last_b = n - (k - 1 - j);
      for (int b = 1; b <= last_b; ++b) {
        const int a_new = b - 1;
        if (reach_[a_new]) {
          const double ha = h(a_new);
          while (tail > head && h(window_[tail - 1]) <= ha) --tail;
          window_[tail++] = a_new;
        }
        while (tail > head && window_[head] < lo[b]) ++head;
        if (b < first_b || tail == head) continue;
        if (j == k - 1 && b != n) continue;
        const int a = window_[head];
        if (h(a) >= prefix_[b] * slow + right[b] - T) {
          next_[b] = 1;
          any = true;
          if (parents) (*parents)[j][b] = a;
        }
      }
      reach_.swap(next_);
      if (!any) return false;  // no stage j ends anywhere: later stages cannot start
    }
    return reach_[n];
  }

  // Smallest T (to relative precision) with a feasible split; infinity when
  // memory admits none. `lower` receives the largest T proven infeasible.
  double MinBottleneck(double* lower, const PartitionProblem& problem) {
    if (!Feasible(kInf, nullptr)) {
      *lower = kInf;
      return kInf;
    }
    double lo = 0;
    double hi = std::max(prefix_.back(), 1e-12);
    while (!Feasible(hi, nullptr)) {
      lo = hi;
      hi *= 2;
    }
    for (int it = 0; it < 200 && hi - lo > 1e-10 * hi; ++it) {
      const double mid = (lo + hi) / 2;
      (Feasible(mid, nullptr) ? hi : lo) = mid;
      ++iterations_;
      if (problem.ShouldStop()) break;
    }
    *lower = lo;
    return hi;
  }

  std::vector<int> Reconstruct(double T) {
    std::vector<std::vector<int>> parents;
    Feasible(T, &parents);
    const int k = p_.num_stages();
    std::vector<int> stage(g_.num_nodes());
    int b = g_.num_nodes();
    for (int j = k - 1; j >= 0; --j) {
      const int a = parents[j][b];
      for (int i = a; i < b; ++i) stage[g_.topo_order()[i]] = j;
      b = a;
    }
    return stage;
  }

  int64_t iterations() const { return iterations_; }

 private:
  const PartitionProblem& p_;
  const Graph& g_;
  std::vector<double> prefix_;
  std::vector<std::vector<double>> left_, right_;
  std::vector<std::vector<int>> lo_;
  std::vector<char> reach_, next_;  // Feasible's scratch, kept between calls
  std::vector<int> window_;
  int64_t iterations_ = 0;
};

// The smallest factor by which every device's memory must grow for some split
// of the order to fit; used to tell the user how much memory is missing.
double MemoryShortfall(ChainDp& dp, const PartitionProblem& problem) {
  double lo = 1, hi = 2;
  for (;;) {
    dp.ComputeMemoryWindows(hi);
    if (dp.Feasible(kInf, nullptr)) break;
    lo = hi;
    hi *= 2;
    if (hi > 1e12) return kInf;
  }
  // Three significant digits are plenty for telling the user what is missing.
  for (int it = 0; it < 12 && !problem.ShouldStop(); ++it) {
    const double mid = (lo + hi) / 2;
    dp.ComputeMemoryWindows(mid);
    (dp.Feasible(kInf, nullptr) ? hi : lo) = mid;
  }
  return hi;
}

class ChainDpPartitioner : public Partitioner {
 public:
  std::string_view name() const override { return "dp"; }

  absl::StatusOr<Partition> Solve(const PartitionProblem& problem) const override {
    const Graph& g = problem.graph();
    const int k = problem.num_stages();
    PIPEPLAN_RETURN_IF_ERROR(ValidateProblem(problem));
    const CutTraffic relay = RelayTraffic(*problem.cost);
    ChainDp dp(problem);
    dp.SetTraffic(relay, relay, /*fastest_link=*/false);
    dp.ComputeMemoryWindows(1.0);
    double lower = 0;
    const double best = dp.MinBottleneck(&lower, problem);
    if (std::isinf(best)) {
      const double scale = MemoryShortfall(dp, problem);
      double largest = 0;
      for (int j = 0; j < k; ++j) largest = std::max(largest, StageMemoryCap(problem, j));
      return absl::FailedPreconditionError(absl::StrFormat(
          "the model does not fit in memory on any split into %d stages: the best split needs "
          "about %.3g bytes (%.2f GiB) on its fullest stage where the largest stage may use %.3g "
          "bytes; add devices or stages, lower microbatches in flight, or use a smaller "
          "optimizer state",
          k, largest * scale, largest * scale / (1 << 30), largest));
    }
    PIPEPLAN_ASSIGN_OR_RETURN(Partition result, MakePartition(problem, dp.Reconstruct(best)));
    result.nodes_explored = dp.iterations();
    if (HasUniqueTopologicalOrder(g)) {
      if (problem.cost->options().comm_model == CommModel::kRelay) {
        result.lower_bound = std::min(lower, result.objective);
        result.note = "exact: the graph has one topological order";
      } else {
        const DirectBoundTraffic bound = DirectLowerTraffic(*problem.cost);
        ChainDp lb(problem);
        lb.SetTraffic(bound.recv, bound.send, /*fastest_link=*/true);
        lb.ComputeMemoryWindows(1.0);
        double lb_lower = 0;
        lb.MinBottleneck(&lb_lower, problem);
        result.lower_bound = std::min(lb_lower, result.objective);
        result.note = "bounded: the graph has one topological order";
      }
    } else {
      result.note = "heuristic: one topological order of a DAG";
    }
    return result;
  }
};

}  // namespace

double MemoryScaleNeeded(const PartitionProblem& problem) {
  if (!ValidateProblem(problem).ok()) return kInf;
  ChainDp dp(problem);
  const CutTraffic relay = RelayTraffic(*problem.cost);
  dp.SetTraffic(relay, relay, /*fastest_link=*/false);
  dp.ComputeMemoryWindows(1.0);
  if (dp.Feasible(kInf, nullptr)) return 1;
  return MemoryShortfall(dp, problem);
}

std::unique_ptr<Partitioner> MakeChainDpPartitioner() {
  return std::make_unique<ChainDpPartitioner>();
}

}  // namespace pipeplan
