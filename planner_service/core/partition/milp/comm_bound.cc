#include "comm_bound.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "milp_model.h"

namespace pipeplan::milp_internal {
namespace {

// Minimum-cost assignment of every row to a distinct column (rows <= cols),
// Hungarian algorithm, O(rows^2 cols).
double MinAssignment(const std::vector<std::vector<double>>& a) {
  const int n = static_cast<int>(a.size()), m = n ? static_cast<int>(a[0].size()) : 0;
  std::vector<double> u(n + 1, 0), v(m + 1, 0), minv(m + 1);
  std::vector<int> p(m + 1, 0), way(m + 1, 0);
  std::vector<char> used(m + 1);
  for (int i = 1; i <= n; ++i) {
    p[0] = i;
    int j0 = 0;
    std::fill(minv.begin(), minv.end(), kInf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[j0] = 1;
      const int i0 = p[j0];
      int j1 = 0;
      double delta = kInf;
      for (int j = 1; j <= m; ++j) {
        if (used[j]) continue;
        const double cur = a[i0 - 1][j - 1] - u[i0] - v[j];
        if (cur < minv[j]) {
          minv[j] = cur;
          way[j] = j0;
        }
        if (minv[j] < delta) {
          delta = minv[j];
          j1 = j;
        }
      }
      for (int j = 0; j <= m; ++j) {
        if (used[j]) {
          u[p[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      const int j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  return -v[0];
}

constexpr double kTol = 1 + 1e-9;
constexpr double kBig = 1e30;

// The super-node DAG of a contraction: the largest edge bytes per pair of
// super-nodes and a topological order.
struct SuperDag {
  std::map<std::pair<int, int>, double> pair_bytes;
  std::vector<std::vector<int>> succ, pred;
  std::vector<int> order;
};

// Nothing when the bound would be too costly (pairs x stages over 4e6) or
// the contraction is not acyclic.
std::optional<SuperDag> BuildSuperDag(const CostModel& cost, const Contraction& c, int k) {
  const Graph& g = cost.graph();
  const int m = c.num_super;
  SuperDag d;
  for (int e = 0; e < g.num_edges(); ++e) {
    const int a = c.super_of_node[g.edge(e).src], b = c.super_of_node[g.edge(e).dst];
    if (a == b) continue;
    double& bytes = d.pair_bytes[{a, b}];
    bytes = std::max(bytes, cost.edge_bytes(e));
  }
  if (static_cast<double>(d.pair_bytes.size()) * k > 4e6) return std::nullopt;
  d.succ.resize(m);
  d.pred.resize(m);
  for (const auto& [ab, bytes] : d.pair_bytes) {
    d.succ[ab.first].push_back(ab.second);
    d.pred[ab.second].push_back(ab.first);
  }
  std::vector<int> indeg(m);
  for (int s = 0; s < m; ++s) indeg[s] = static_cast<int>(d.pred[s].size());
  for (int s = 0; s < m; ++s) {
    if (indeg[s] == 0) d.order.push_back(s);
  }
  for (size_t i = 0; i < d.order.size(); ++i) {
    for (int t : d.succ[d.order[i]]) {
      if (--indeg[t] == 0) d.order.push_back(t);
    }
  }
  if (static_cast<int>(d.order.size()) != m) return std::nullopt;
  return d;
}

// Per super-node: the work of it with all its ancestors (anc) / descendants
// (desc), and how many super-nodes are not its descendants / ancestors (m
// when unknown).
struct Reach {
  std::vector<double> anc, desc;
  std::vector<int> non_desc, non_anc;
};

// Exact, with a bitset row per super-node.
Reach ExactReach(const SuperDag& d, const Contraction& c) {
  const int m = c.num_super;
  Reach r{std::vector<double>(m), std::vector<double>(m), std::vector<int>(m, m),
          std::vector<int>(m, m)};
  const int words = (m + 63) / 64;
  std::vector<uint64_t> bits(static_cast<size_t>(m) * words);
  auto row = [&](int s) { return bits.data() + static_cast<size_t>(s) * words; };
  // The closure of each super-node over `links`, visited in `order`.
  auto close = [&](auto begin, auto end, const std::vector<std::vector<int>>& links,
                   std::vector<double>& work, std::vector<int>& non) {
    for (auto it = begin; it != end; ++it) {
      const int s = *it;
      uint64_t* own = row(s);
      own[s / 64] |= uint64_t{1} << (s % 64);
      for (int t : links[s]) {
        const uint64_t* q = row(t);
        for (int i = 0; i < words; ++i) own[i] |= q[i];
      }
      double w = 0;
      int count = 0;
      for (int i = 0; i < words; ++i) {
        for (uint64_t x = own[i]; x; x &= x - 1) {
          w += c.work_ref[i * 64 + __builtin_ctzll(x)];
          ++count;
        }
      }
      work[s] = w;
      non[s] = m - count;  // excludes s itself (set in its own row)
    }
  };
  close(d.order.begin(), d.order.end(), d.pred, r.anc, r.non_anc);
  std::fill(bits.begin(), bits.end(), 0);
  close(d.order.rbegin(), d.order.rend(), d.succ, r.desc, r.non_desc);
  return r;
}

// Too many super-nodes for bitsets: the heaviest path, a lower bound on
// anc/desc, which keeps every test valid; the counts stay unknown.
Reach HeaviestPathReach(const SuperDag& d, const Contraction& c) {
  const int m = c.num_super;
  Reach r{std::vector<double>(m), std::vector<double>(m), std::vector<int>(m, m),
          std::vector<int>(m, m)};
  for (int s : d.order) {
    r.anc[s] = c.work_ref[s];
    for (int p : d.pred[s]) r.anc[s] = std::max(r.anc[s], r.anc[p] + c.work_ref[s]);
  }
  for (auto it = d.order.rbegin(); it != d.order.rend(); ++it) {
    const int s = *it;
    r.desc[s] = c.work_ref[s];
    for (int t : d.succ[s]) r.desc[s] = std::max(r.desc[s], r.desc[t] + c.work_ref[s]);
  }
  return r;
}

// Per stage: the cheapest per-byte and fixed cost of receiving into and
// sending from it over any link the cost model could use, and its slowdown.
struct StageComm {
  std::vector<double> in_rho, in_lat, out_rho, out_lat, slow;
};

StageComm CheapestLinks(const PartitionProblem& problem) {
  const CostModel& cost = *problem.cost;
  const int k = problem.num_stages();
  const Links links(problem);
  const bool relay = cost.options().comm_model == CommModel::kRelay;
  StageComm sc{std::vector<double>(k, kInf), std::vector<double>(k, kInf),
               std::vector<double>(k, kInf), std::vector<double>(k, kInf), std::vector<double>(k)};
  for (int j = 0; j < k; ++j) {
    for (int a = relay ? std::max(0, j - 1) : 0; a < j; ++a) {
      sc.in_rho[j] = std::min(sc.in_rho[j], links.rho[a * k + j]);
      sc.in_lat[j] = std::min(sc.in_lat[j], links.lat[a * k + j]);
    }
    for (int b = j + 1; b < (relay ? std::min(k, j + 2) : k); ++b) {
      sc.out_rho[j] = std::min(sc.out_rho[j], links.rho[j * k + b]);
      sc.out_lat[j] = std::min(sc.out_lat[j], links.lat[j * k + b]);
    }
    sc.slow[j] = cost.slowdown(problem.stage_device[j]);
  }
  return sc;
}

// The tests that rule out a bottleneck T (docs/partitioning.md,
// "Communication lower bound").
class CommTest {
 public:
  CommTest(const SuperDag& dag, const Reach& reach, StageComm sc, const Contraction& c, int k)
      : d_(dag), r_(reach), sc_(std::move(sc)), k_(k), m_(c.num_super), recv_w_(k), send_w_(k) {
    for (int s = 0; s < m_; ++s) total_ += c.work_ref[s];
  }

  // The communication each stage needs at bottleneck T; false when T is
  // impossible.
  bool Feasible(double T, std::vector<double>* need) {
    return RaiseNeeds(T, need) && BalanceHolds(T);
  }

 private:
  using Witnesses = absl::flat_hash_map<int, double>;  // super-node -> cheapest charge

  static void Put(Witnesses& w, int x, double v) {
    auto [it, fresh] = w.try_emplace(x, v);
    if (!fresh) it->second = std::min(it->second, v);
  }

  // Whether super-node s can sit in stage j given the work bounds P, Q.
  bool InStage(int s, int j, const std::vector<double>& P, const std::vector<double>& Q) const {
    return r_.anc[s] <= P[j] * kTol && r_.desc[s] <= Q[j] * kTol;
  }

  // Each stage's need from its cheapest witnesses, each stage's work cap
  // shrunk by its need, repeated until stable (at most 4 rounds).
  bool RaiseNeeds(double T, std::vector<double>* need);
  // The cheapest receive of stage j (0 for a source that may sit there);
  // records the witnesses in recv_w_[j].
  double CheapestReceive(int j, const std::vector<double>& P, const std::vector<double>& Q);
  // The cheapest send of stage j (0 for a sink that may sit there); records
  // the witnesses in send_w_[j].
  double CheapestSend(int j, const std::vector<double>& P, const std::vector<double>& Q);
  // Balance: sum_j (T - comm_j) / slow_j >= total work, where the stages'
  // witnesses are distinct super-nodes, so sum_j comm_j / slow_j is at
  // least two minimum-cost assignments (receives, sends).
  bool BalanceHolds(double T) const;
  // That assignment for receives or sends; false when none exists.
  bool AssignmentCost(bool receives, double* cost) const;

  const SuperDag& d_;
  const Reach& r_;
  const StageComm sc_;
  const int k_, m_;
  double total_ = 0;
  std::vector<Witnesses> recv_w_, send_w_;
};

bool CommTest::RaiseNeeds(double T, std::vector<double>* need) {
  std::vector<double> cap(k_), P(k_), Q(k_);
  need->assign(k_, 0);
  for (int j = 0; j < k_; ++j) cap[j] = T / sc_.slow[j];
  for (int round = 0; round < 4; ++round) {
    double run = 0;
    for (int j = 0; j < k_; ++j) P[j] = run += cap[j];
    run = 0;
    for (int j = k_ - 1; j >= 0; --j) Q[j] = run += cap[j];
    if (P[k_ - 1] < total_ / kTol) return false;
    bool changed = false;
    for (int j = 0; j < k_; ++j) {
      const double nj = CheapestReceive(j, P, Q) + CheapestSend(j, P, Q);
      if (!(nj <= T * kTol)) return false;
      if (nj > (*need)[j]) {
        (*need)[j] = nj;
        changed = true;
      }
      cap[j] = std::max(0.0, (T - nj) / sc_.slow[j]);
    }
    if (!changed) break;
  }
  return true;
}

double CommTest::CheapestReceive(int j, const std::vector<double>& P,
                                 const std::vector<double>& Q) {
  recv_w_[j].clear();
  if (j == 0) return 0;
  double recv = kInf;
  for (int s = 0; s < m_; ++s) {
    if (d_.pred[s].empty() && r_.non_desc[s] >= j && InStage(s, j, P, Q)) {
      Put(recv_w_[j], s, 0);
      recv = 0;
    }
  }
  for (const auto& [ab, bytes] : d_.pair_bytes) {
    const auto [a, b] = ab;
    if (r_.anc[a] <= P[j - 1] * kTol && InStage(b, j, P, Q)) {
      const double v = 2 * (bytes * sc_.in_rho[j] + sc_.in_lat[j]);
      Put(recv_w_[j], b, v);
      recv = std::min(recv, v);
    }
  }
  return recv;
}

double CommTest::CheapestSend(int j, const std::vector<double>& P, const std::vector<double>& Q) {
  send_w_[j].clear();
  if (j + 1 >= k_) return 0;
  double send = kInf;
  for (int s = 0; s < m_; ++s) {
    if (d_.succ[s].empty() && r_.non_anc[s] >= k_ - 1 - j && InStage(s, j, P, Q)) {
      Put(send_w_[j], s, 0);
      send = 0;
    }
  }
  for (const auto& [ab, bytes] : d_.pair_bytes) {
    const auto [a, b] = ab;
    if (InStage(a, j, P, Q) && r_.desc[b] <= Q[j + 1] * kTol) {
      const double v = 2 * (bytes * sc_.out_rho[j] + sc_.out_lat[j]);
      Put(send_w_[j], a, v);
      send = std::min(send, v);
    }
  }
  return send;
}

bool CommTest::BalanceHolds(double T) const {
  double room = -total_;
  for (int j = 0; j < k_; ++j) room += T / sc_.slow[j];
  if (room < -total_ * 1e-9) return false;
  for (bool receives : {true, false}) {
    double cost = 0;
    if (!AssignmentCost(receives, &cost)) return false;
    room -= cost;
  }
  return room >= -total_ * 1e-9;
}

bool CommTest::AssignmentCost(bool receives, double* cost) const {
  const std::vector<Witnesses>& w = receives ? recv_w_ : send_w_;
  *cost = 0;
  std::vector<int> rows;
  for (int j = 0; j < k_; ++j) {
    if (receives ? j > 0 : j + 1 < k_) rows.push_back(j);
  }
  if (rows.empty()) return true;
  const int r = static_cast<int>(rows.size());
  // Row j keeps its r cheapest witnesses; any other costs at least the
  // r-th cheapest (or is impossible when the row has fewer).
  std::vector<std::vector<std::pair<double, int>>> top(r);
  std::vector<double> floor(r, kBig);
  absl::flat_hash_map<int, int> col;
  for (int i = 0; i < r; ++i) {
    for (const auto& [x, v] : w[rows[i]]) top[i].emplace_back(v, x);
    std::sort(top[i].begin(), top[i].end());
    if (static_cast<int>(top[i].size()) > r) {
      top[i].resize(r);
      floor[i] = top[i].back().first;
    }
    for (const auto& [v, x] : top[i]) col.try_emplace(x, static_cast<int>(col.size()));
  }
  if (static_cast<int>(col.size()) < r) return false;
  std::vector<std::vector<double>> a(r, std::vector<double>(col.size()));
  for (int i = 0; i < r; ++i) {
    const double slow = sc_.slow[rows[i]];
    std::fill(a[i].begin(), a[i].end(), floor[i] >= kBig ? kBig : floor[i] / slow);
    for (const auto& [v, x] : top[i]) a[i][col.at(x)] = v / slow;
  }
  const double assigned = MinAssignment(a);
  if (assigned >= kBig / 2) return false;
  *cost = assigned;
  return true;
}

}  // namespace

CommBound CommLowerBound(const PartitionProblem& problem, const Contraction& c, double lo,
                         double ub) {
  CommBound out;
  const int k = problem.num_stages();
  if (k < 2 || c.lossy || !std::isfinite(ub) || ub <= lo) return out;
  const std::optional<SuperDag> dag = BuildSuperDag(*problem.cost, c, k);
  if (!dag) return out;
  const Reach reach = c.num_super <= 4096 ? ExactReach(*dag, c) : HeaviestPathReach(*dag, c);
  CommTest test(*dag, reach, CheapestLinks(problem), c, k);
  std::vector<double> need;
  if (!test.Feasible(ub, &need)) {
    // The incumbent meets every test; reaching here would be a bug in the
    // reasoning behind them, so claim nothing.
    return out;
  }
  out.need_at_ub = need;
  double a = std::max(lo, 0.0), b = ub;
  if (test.Feasible(a, &need)) {
    out.bound = a;
    return out;
  }
  for (int it = 0; it < 40 && b - a > 1e-7 * b; ++it) {
    const double mid = (a + b) / 2;
    (test.Feasible(mid, &need) ? b : a) = mid;
  }
  out.bound = a;  // every T below a fails
  if (problem.log) {
    test.Feasible(b, &need);
    std::string line =
        absl::StrFormat("[milp] comm bound %.6g (lo %.6g, ub %.6g); need at %.6g:", a, lo, ub, b);
    for (double x : need) absl::StrAppendFormat(&line, " %.3g", x);
    problem.log(line);
  }
  return out;
}

}  // namespace pipeplan::milp_internal
