#include "comm_bound.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
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

}  // namespace

CommBound CommLowerBound(const PartitionProblem& problem, const Contraction& c, double lo,
                         double ub) {
  CommBound out;
  const CostModel& cost = *problem.cost;
  const Graph& g = cost.graph();
  const int k = problem.num_stages(), m = c.num_super;
  if (k < 2 || c.lossy || !std::isfinite(ub) || ub <= lo) return out;
  // Super-node edges with bytes (largest edge per pair).
  std::map<std::pair<int, int>, double> pair_bytes;
  for (int e = 0; e < g.num_edges(); ++e) {
    const int a = c.super_of_node[g.edge(e).src], b = c.super_of_node[g.edge(e).dst];
    if (a == b) continue;
    double& bytes = pair_bytes[{a, b}];
    bytes = std::max(bytes, cost.edge_bytes(e));
  }
  if (static_cast<double>(pair_bytes.size()) * k > 4e6) return out;
  // Topological order of the super-node DAG.
  std::vector<std::vector<int>> succ(m), pred(m);
  for (const auto& [ab, bytes] : pair_bytes) {
    succ[ab.first].push_back(ab.second);
    pred[ab.second].push_back(ab.first);
  }
  std::vector<int> order, indeg(m);
  for (int s = 0; s < m; ++s) indeg[s] = static_cast<int>(pred[s].size());
  for (int s = 0; s < m; ++s) {
    if (indeg[s] == 0) order.push_back(s);
  }
  for (size_t i = 0; i < order.size(); ++i) {
    for (int t : succ[order[i]]) {
      if (--indeg[t] == 0) order.push_back(t);
    }
  }
  if (static_cast<int>(order.size()) != m) return out;
  // anc/desc work (exact with bitsets when small, else the heaviest path, a
  // lower bound, which keeps every test valid) and, when exact, the number
  // of super-nodes that are not descendants / ancestors.
  std::vector<double> anc(m), desc(m);
  std::vector<int> non_desc(m, m), non_anc(m, m);
  const bool exact = m <= 4096;
  if (exact) {
    const int words = (m + 63) / 64;
    std::vector<uint64_t> bits(static_cast<size_t>(m) * words);
    auto row = [&](int s) { return bits.data() + static_cast<size_t>(s) * words; };
    auto sum = [&](int s, std::vector<double>& work, std::vector<int>& non) {
      double w = 0;
      int count = 0;
      const uint64_t* r = row(s);
      for (int i = 0; i < words; ++i) {
        for (uint64_t x = r[i]; x; x &= x - 1) {
          const int t = i * 64 + __builtin_ctzll(x);
          w += c.work_ref[t];
          ++count;
        }
      }
      work[s] = w;
      non[s] = m - count;  // excludes s itself (set in its own row)
    };
    for (int s : order) {
      uint64_t* r = row(s);
      r[s / 64] |= uint64_t{1} << (s % 64);
      for (int p : pred[s]) {
        const uint64_t* q = row(p);
        for (int i = 0; i < words; ++i) r[i] |= q[i];
      }
      sum(s, anc, non_anc);
    }
    std::fill(bits.begin(), bits.end(), 0);
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const int s = *it;
      uint64_t* r = row(s);
      r[s / 64] |= uint64_t{1} << (s % 64);
      for (int t : succ[s]) {
        const uint64_t* q = row(t);
        for (int i = 0; i < words; ++i) r[i] |= q[i];
      }
      sum(s, desc, non_desc);
    }
  } else {
    for (int s : order) {
      anc[s] = c.work_ref[s];
      for (int p : pred[s]) anc[s] = std::max(anc[s], anc[p] + c.work_ref[s]);
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const int s = *it;
      desc[s] = c.work_ref[s];
      for (int t : succ[s]) desc[s] = std::max(desc[s], desc[t] + c.work_ref[s]);
    }
  }
  // Cheapest per-byte and fixed cost of receiving into / sending from j.
  const Links links(problem);
  const bool relay = cost.options().comm_model == CommModel::kRelay;
  std::vector<double> in_rho(k, kInf), in_lat(k, kInf), out_rho(k, kInf), out_lat(k, kInf);
  for (int j = 0; j < k; ++j) {
    for (int a = relay ? std::max(0, j - 1) : 0; a < j; ++a) {
      in_rho[j] = std::min(in_rho[j], links.rho[a * k + j]);
      in_lat[j] = std::min(in_lat[j], links.lat[a * k + j]);
    }
    for (int b = j + 1; b < (relay ? std::min(k, j + 2) : k); ++b) {
      out_rho[j] = std::min(out_rho[j], links.rho[j * k + b]);
      out_lat[j] = std::min(out_lat[j], links.lat[j * k + b]);
    }
  }
  std::vector<double> slow(k);
  for (int j = 0; j < k; ++j) slow[j] = cost.slowdown(problem.stage_device[j]);
  double total = 0;
  for (int s = 0; s < m; ++s) total += c.work_ref[s];
  constexpr double kTol = 1 + 1e-9;

  // need (per stage) for bottleneck T; false when T is impossible.
  std::vector<absl::flat_hash_map<int, double>> recv_w(k), send_w(k);
  constexpr double kBig = 1e30;
  auto feasible = [&](double T, std::vector<double>* need) {
    std::vector<double> cap(k), P(k), Q(k);
    need->assign(k, 0);
    for (int j = 0; j < k; ++j) cap[j] = T / slow[j];
    for (int round = 0; round < 4; ++round) {
      double run = 0;
      for (int j = 0; j < k; ++j) P[j] = run += cap[j];
      run = 0;
      for (int j = k - 1; j >= 0; --j) Q[j] = run += cap[j];
      if (P[k - 1] < total / kTol) return false;
      bool changed = false;
      // Witnesses (the super-node of stage j the argument above finds) and
      // their cheapest charge: recv_w[j][X], send_w[j][X].
      for (int j = 0; j < k; ++j) {
        recv_w[j].clear();
        send_w[j].clear();
        auto in_stage = [&](int s) { return anc[s] <= P[j] * kTol && desc[s] <= Q[j] * kTol; };
        auto put = [](absl::flat_hash_map<int, double>& w, int x, double v) {
          auto [it, fresh] = w.try_emplace(x, v);
          if (!fresh) it->second = std::min(it->second, v);
        };
        double recv = 0, send = 0;
        if (j > 0) {
          recv = kInf;
          for (int s = 0; s < m; ++s) {
            if (pred[s].empty() && non_desc[s] >= j && in_stage(s)) {
              put(recv_w[j], s, 0);
              recv = 0;
            }
          }
          for (const auto& [ab, bytes] : pair_bytes) {
            const auto [a, b] = ab;
            if (anc[a] <= P[j - 1] * kTol && in_stage(b)) {
              const double v = 2 * (bytes * in_rho[j] + in_lat[j]);
              put(recv_w[j], b, v);
              recv = std::min(recv, v);
            }
          }
        }
        if (j + 1 < k) {
          send = kInf;
          for (int s = 0; s < m; ++s) {
            if (succ[s].empty() && non_anc[s] >= k - 1 - j && in_stage(s)) {
              put(send_w[j], s, 0);
              send = 0;
            }
          }
          for (const auto& [ab, bytes] : pair_bytes) {
            const auto [a, b] = ab;
            if (in_stage(a) && desc[b] <= Q[j + 1] * kTol) {
              const double v = 2 * (bytes * out_rho[j] + out_lat[j]);
              put(send_w[j], a, v);
              send = std::min(send, v);
            }
          }
        }
        const double nj = recv + send;
        if (!(nj <= T * kTol)) return false;
        if (nj > (*need)[j]) {
          (*need)[j] = nj;
          changed = true;
        }
        cap[j] = std::max(0.0, (T - nj) / slow[j]);
      }
      if (!changed) break;
    }
    // Balance: sum_j (T - comm_j) / slow_j >= total work, where the stages'
    // witnesses are distinct super-nodes, so sum_j comm_j / slow_j is at
    // least two minimum-cost assignments (receives, sends).
    double room = -total;
    for (int j = 0; j < k; ++j) room += T / slow[j];
    if (room < -total * 1e-9) return false;
    for (auto* w : {&recv_w, &send_w}) {
      std::vector<int> rows;
      for (int j = 0; j < k; ++j) {
        if (w == &recv_w ? j > 0 : j + 1 < k) rows.push_back(j);
      }
      if (rows.empty()) continue;
      const int r = static_cast<int>(rows.size());
      // Row j keeps its r cheapest witnesses; any other costs at least the
      // r-th cheapest (or is impossible when the row has fewer).
      std::vector<std::vector<std::pair<double, int>>> top(r);
      std::vector<double> floor(r, kBig);
      absl::flat_hash_map<int, int> col;
      for (int i = 0; i < r; ++i) {
        for (const auto& [x, v] : (*w)[rows[i]]) top[i].emplace_back(v, x);
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
        std::fill(a[i].begin(), a[i].end(), floor[i] >= kBig ? kBig : floor[i] / slow[rows[i]]);
        for (const auto& [v, x] : top[i]) a[i][col[x]] = v / slow[rows[i]];
      }
      const double cost = MinAssignment(a);
      if (cost >= kBig / 2) return false;
      room -= cost;
    }
    return room >= -total * 1e-9;
  };
  std::vector<double> need;
  if (!feasible(ub, &need)) {
    // The incumbent meets every test; reaching here would be a bug in the
    // reasoning above, so claim nothing.
    return out;
  }
  out.need_at_ub = need;
  double a = std::max(lo, 0.0), b = ub;
  if (feasible(a, &need)) {
    out.bound = a;
    return out;
  }
  for (int it = 0; it < 40 && b - a > 1e-7 * b; ++it) {
    const double mid = (a + b) / 2;
    (feasible(mid, &need) ? b : a) = mid;
  }
  out.bound = a;  // every T below a fails
  if (problem.log) {
    feasible(b, &need);
    std::string line =
        absl::StrFormat("[milp] comm bound %.6g (lo %.6g, ub %.6g); need at %.6g:", a, lo, ub, b);
    for (double x : need) absl::StrAppendFormat(&line, " %.3g", x);
    problem.log(line);
  }
  return out;
}

}  // namespace pipeplan::milp_internal
