// Exact min-max DP over the graph's topological order: binary search on the
// bottleneck with an O(n·k) sliding-window feasibility test; exact for
// chains, a heuristic and warm start for other DAGs. Derivation:
// docs/partitioning.md, "Chain DP".
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/core/partition.h"

namespace pipeplan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Feasible's bands are drawn for T grown by this much, so that an infeasible
// test can vouch for a range of T above it (see Feasible, SetBands).
constexpr double kBandRoom = 1e-3;

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
    monotone_ = std::is_sorted(prefix_.begin(), prefix_.end());
  }

  // Charges for cut traffic: stage j pays charge(left_[j])[a] at its start
  // cut and charge(right_[j])[b] at its end cut. Stages whose neighbouring
  // link is alike (same bandwidth and latency) share one charge vector, so
  // a deep pipeline costs a few vectors, not two per stage.
  void SetTraffic(const CutTraffic& recv, const CutTraffic& send, bool fastest_link) {
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
    charges_.assign(1, std::vector<double>(g_.num_nodes() + 1, 0));  // 0: no link
    std::map<std::tuple<int, double, double>, int> seen;             // (side, bandwidth, latency)
    auto charge = [&](int side, int da, int db) {
      if (da == db) return 0;
      const double bw = fastest_link ? best_bw : cl.bandwidth(da, db);
      const double lat = fastest_link ? best_lat : cl.latency(da, db);
      auto [it, fresh] = seen.emplace(std::tuple(side, bw, lat), static_cast<int>(charges_.size()));
      if (!fresh) return it->second;
      const CutTraffic& t = side == 0 ? recv : send;
      std::vector<double> c(g_.num_nodes() + 1, 0);
      for (int cut = 1; cut < g_.num_nodes(); ++cut) {
        if (t.count[cut] != 0) c[cut] = 2 * (t.bytes[cut] / bw + t.count[cut] * lat);
      }
      charges_.push_back(std::move(c));
      return it->second;
    };
    left_.assign(k, 0);
    right_.assign(k, 0);
    magnitude_ = 0;
    for (int j = 0; j < k; ++j) {
      const int d = p_.stage_device[j];
      if (j > 0) left_[j] = charge(0, p_.stage_device[j - 1], d);
      if (j + 1 < k) right_[j] = charge(1, d, p_.stage_device[j + 1]);
      magnitude_ = std::max(magnitude_, prefix_.back() * p_.cost->slowdown(d));
    }
    for (const std::vector<double>& c : charges_) {
      magnitude_ += *std::max_element(c.begin(), c.end());
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

  // Whether a split with every stage cost <= T exists. Records the chosen
  // start of each reached stage end in parent_ (read back by Path), and
  // when there is none, in jump_ how far T may grow with the answer still
  // no: the least growth at which some stage end, or some band, changes.
  // Nothing changes below that, so nothing is reached that was not.
  bool Feasible(double T) {
    const int n = g_.num_nodes();
    const int k = p_.num_stages();
    reach_.assign(n + 1, 0);
    next_.assign(n + 1, 0);
    reach_[0] = 1;
    // A monotone queue of starts (decreasing h) in a flat buffer: each start
    // enters once per stage, so head and tail only move forward.
    window_.resize(n + 1);
    parent_.resize(static_cast<size_t>(k) * (n + 1));
    jump_ = SetBands(T * (1 + kBandRoom));
    const double margin = 8 * std::numeric_limits<double>::epsilon() * (magnitude_ + T);
    int reach_lo = 0, reach_hi = 0;  // every reached start lies in [reach_lo, reach_hi]
    for (int j = 0; j < k; ++j) {
      const double slow = p_.cost->slowdown(p_.stage_device[j]);
      const std::vector<double>& left = charges_[left_[j]];
      const std::vector<double>& right = charges_[right_[j]];
      const std::vector<int>& lo = lo_[j];
      int* parent = &parent_[static_cast<size_t>(j) * (n + 1)];
      auto h = [&](int a) { return prefix_[a] * slow - left[a]; };
      int head = 0, tail = 0;
      int next_lo = n + 1, next_hi = -1;
      const int first_b = std::max(j + 1, band_lo_[j]);
      const int last_b = std::min(n - (k - 1 - j), band_hi_[j]);
      for (int b = reach_lo + 1; b <= last_b; ++b) {
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
        const double need = prefix_[b] * slow + right[b] - T;
        if (h(a) >= need) {
          next_[b] = 1;
          next_lo = std::min(next_lo, b);
          next_hi = b;
          parent[b] = a;
        } else {
          jump_ = std::min(jump_, need - h(a) - margin);
        }
      }
      std::fill(reach_.begin() + reach_lo, reach_.begin() + reach_hi + 1, 0);
      reach_.swap(next_);
      if (next_hi < 0) return false;  // no stage j ends anywhere: later stages cannot start
      reach_lo = next_lo;
      reach_hi = next_hi;
    }
    return reach_[n];
  }

  // band_lo_[j]..band_hi_[j]: where stage j may end under T. Its work
  // (cut traffic only adds) must fit in what stages 0..j reach packing
  // greedily from the start, and the rest of the order in what stages
  // j+1.. reach packing greedily from the end. A necessary condition with a
  // margin for rounding, so the test's answer and the parents on every
  // feasible path stay as without it: only dead ends are skipped, which
  // near the optimum is most of the O(n k) table. Returns how far T may
  // grow before a band changes.
  double SetBands(double T) {
    const int n = g_.num_nodes();
    const int k = p_.num_stages();
    band_lo_.assign(k, 0);
    band_hi_.assign(k, n);
    if (!std::isfinite(T) || !monotone_) return 0;
    const double slack = 1e-9 * prefix_.back() + 1e-300;
    constexpr double kWiden = 1 + 1e-9;
    double change = kInf;  // least T at which a band moves
    auto moves_at = [&](double work, double slow) {
      const double t = (work - slack) * slow / kWiden;
      change = std::min(change, t - 1e-12 * std::abs(t));
    };
    int end = 0;
    for (int j = 0; j < k; ++j) {
      const double slow = p_.cost->slowdown(p_.stage_device[j]);
      const int from = end;
      const double limit = prefix_[from] + T / slow * kWiden + slack;
      end = static_cast<int>(std::upper_bound(prefix_.begin(), prefix_.end(), limit) -
                             prefix_.begin()) -
            1;
      band_hi_[j] = end;
      if (end < n) moves_at(prefix_[end + 1] - prefix_[from], slow);
    }
    int start = n;
    for (int j = k - 1; j >= 0; --j) {
      band_lo_[j] = start;
      if (j == 0) break;
      const double slow = p_.cost->slowdown(p_.stage_device[j]);
      const int to = start;
      const double limit = prefix_[to] - T / slow * kWiden - slack;
      start = static_cast<int>(std::lower_bound(prefix_.begin(), prefix_.end(), limit) -
                               prefix_.begin());
      if (start > 0) moves_at(prefix_[to] - prefix_[start - 1], slow);
    }
    return change - T / (1 + kBandRoom);
  }

  // The split found by the last feasible test, as the start of every
  // stage's block and the end after it.
  std::vector<std::pair<int, int>> Path() const {
    const int n = g_.num_nodes();
    std::vector<std::pair<int, int>> out(p_.num_stages());
    int b = n;
    for (int j = p_.num_stages() - 1; j >= 0; --j) {
      const int a = parent_[static_cast<size_t>(j) * (n + 1) + b];
      out[j] = {a, b};
      b = a;
    }
    return out;
  }

  // The bottleneck of `warm` (a stage per node) where it is a split of the
  // order into the problem's stages within every memory window, by the
  // comparison Feasible makes; infinity otherwise.
  double WarmBottleneck(std::span<const int> warm) const {
    const int n = g_.num_nodes();
    const int k = p_.num_stages();
    if (static_cast<int>(warm.size()) != n || n == 0) return kInf;
    std::vector<std::pair<int, int>> path;  // (start, end) per stage
    for (int i = 0; i < n; ++i) {
      const int stage = warm[g_.topo_order()[i]];
      if (stage == static_cast<int>(path.size())) path.push_back({i, i + 1});
      if (stage != static_cast<int>(path.size()) - 1) return kInf;  // not contiguous
      path.back().second = i + 1;
    }
    if (static_cast<int>(path.size()) != k) return kInf;
    double worst = 0;
    for (int j = 0; j < k; ++j) {
      const auto [a, b] = path[j];
      if (a < lo_[j][b]) return kInf;  // over stage j's memory
      const double slow = p_.cost->slowdown(p_.stage_device[j]);
      const double h = prefix_[a] * slow - charges_[left_[j]][a];
      worst = std::max(worst, prefix_[b] * slow + charges_[right_[j]][b] - h);
    }
    return Witnessed(path, worst) ? worst : kInf;
  }

  // Whether every stage of `path` passes Feasible's comparison at T.
  bool Witnessed(const std::vector<std::pair<int, int>>& path, double T) const {
    for (int j = 0; j < p_.num_stages(); ++j) {
      const auto [a, b] = path[j];
      const double slow = p_.cost->slowdown(p_.stage_device[j]);
      const double h = prefix_[a] * slow - charges_[left_[j]][a];
      if (!(h >= prefix_[b] * slow + charges_[right_[j]][b] - T)) return false;
    }
    return true;
  }

  // The largest stage cost of the split the last feasible test found at T:
  // every T from it on is feasible too (that split is a witness), which the
  // test confirms with the very comparison Feasible makes. T when rounding
  // denies it.
  double WitnessBottleneck(double T) const {
    std::vector<std::pair<int, int>> path = Path();
    double worst = 0;
    for (int j = 0; j < p_.num_stages(); ++j) {
      const auto [a, b] = path[j];
      const double slow = p_.cost->slowdown(p_.stage_device[j]);
      const double h = prefix_[a] * slow - charges_[left_[j]][a];
      worst = std::max(worst, prefix_[b] * slow + charges_[right_[j]][b] - h);
    }
    return worst <= T && Witnessed(path, worst) ? worst : T;
  }

  // Smallest T (to relative precision) with a feasible split; infinity when
  // memory admits none. `lower` receives the largest T proven infeasible.
  //
  // The bisection's sequence of thresholds is fixed (from [0, total work],
  // halving to 1e-10), so its answer and the split rebuilt at it do not
  // depend on how each test is answered. Feasible is monotone in T, so a
  // test at or above a T known feasible, or at or below one known
  // infeasible, is answered without running it. A feasible test makes its
  // split's own bottleneck known feasible; an infeasible one makes T plus
  // its jump known infeasible; a few probes up from the balance bound find
  // a feasible T near the optimum first. Near the optimum most of the
  // bisection's tests are then answered without a pass.
  double MinBottleneck(double* lower, const PartitionProblem& problem) {
    double yes = WarmBottleneck(problem.warm_start), no = -kInf;
    auto test = [&](double T) {
      if (T >= yes) return true;
      if (T <= no) return false;
      if (Feasible(T)) {
        yes = std::min(yes, WitnessBottleneck(T));
        return true;
      }
      no = std::max(no, T + std::max(0.0, jump_));
      return false;
    };
    // A warm start often has the optimum's bottleneck (screening and the
    // sweep solve alike pipelines one after another): then one pass just
    // below it settles the bisection.
    if (std::isfinite(yes)) test(std::nextafter(yes, 0.0));
    const double balance = BalanceBound();
    for (double f : {1e-4, 1e-3, 1e-2, 0.05, 0.2, 1.0}) {
      if (balance > 0 && test(balance * (1 + f))) break;
    }
    // Whether memory admits any split, asked only when no probe found one
    // (a full pass without bands; the doubling below needs a yes to end).
    // The tests above leave nothing behind that this answer would change.
    if (!std::isfinite(yes) && !Feasible(kInf)) {
      *lower = kInf;
      return kInf;
    }
    double lo = 0;
    double hi = std::max(prefix_.back(), 1e-12);
    while (!test(hi)) {
      lo = hi;
      hi *= 2;
    }
    for (int it = 0; it < 200 && hi - lo > 1e-10 * hi; ++it) {
      const double mid = (lo + hi) / 2;
      (test(mid) ? hi : lo) = mid;
      ++iterations_;
      if (problem.ShouldStop()) break;
    }
    *lower = lo;
    return hi;
  }

  // No split has a bottleneck below the work spread over every stage at
  // its device's speed, nor below the largest node on the fastest of them.
  double BalanceBound() const {
    double capacity = 0;  // work per second of bottleneck, all stages together
    double fastest = kInf;
    for (int d : p_.stage_device) {
      capacity += 1 / p_.cost->slowdown(d);
      fastest = std::min(fastest, p_.cost->slowdown(d));
    }
    double largest = 0;
    for (size_t i = 1; i < prefix_.size(); ++i) {
      largest = std::max(largest, prefix_[i] - prefix_[i - 1]);
    }
    return capacity > 0 ? std::max(prefix_.back() / capacity, largest * fastest) : 0;
  }

  std::vector<int> Reconstruct(double T) {
    Feasible(T);
    std::vector<int> stage(g_.num_nodes());
    const std::vector<std::pair<int, int>> path = Path();
    for (int j = 0; j < p_.num_stages(); ++j) {
      const auto [a, b] = path[j];
      for (int i = a; i < b; ++i) stage[g_.topo_order()[i]] = j;
    }
    return stage;
  }

  int64_t iterations() const { return iterations_; }

 private:
  const PartitionProblem& p_;
  const Graph& g_;
  std::vector<double> prefix_;
  bool monotone_ = true;  // prefix_ never falls (no negative work): SetBands may search it
  std::vector<std::vector<double>> charges_;  // see SetTraffic
  std::vector<int> left_, right_;             // per stage, into charges_
  std::vector<int> band_lo_, band_hi_;        // see SetBands
  std::vector<int> parent_;                   // [stage][end] -> start, see Feasible
  double jump_ = 0;                           // see Feasible
  double magnitude_ = 0;                      // bound on |prefix * slowdown + charge|
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
    if (dp.Feasible(kInf)) break;
    lo = hi;
    hi *= 2;
    if (hi > 1e12) return kInf;
  }
  // Three significant digits are plenty for telling the user what is missing.
  for (int it = 0; it < 12 && !problem.ShouldStop(); ++it) {
    const double mid = (lo + hi) / 2;
    dp.ComputeMemoryWindows(mid);
    (dp.Feasible(kInf) ? hi : lo) = mid;
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
  if (dp.Feasible(kInf)) return 1;
  return MemoryShortfall(dp, problem);
}

std::unique_ptr<Partitioner> MakeChainDpPartitioner() {
  return std::make_unique<ChainDpPartitioner>();
}

}  // namespace pipeplan
