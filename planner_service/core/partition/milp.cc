// CBC mixed-integer program for the contiguous pipeline split.
//
// Formulation over super-nodes S of a contraction (contraction.h), k stages:
//   u[S][j] = [stage(S) <= j], binary, j = 0..k-2 (u[S][-1] = 0, u[S][k-1] = 1)
//   u[S][j] <= u[S][j+1]; u[B][j] <= u[A][j] for every edge A -> B;
//   x[S][j] = u[S][j] - u[S][j-1] (an expression); sum_S x[S][j] >= 1.
//   minimize T;  T >= slowdown_j * sum_S work_S x[S][j] + comm_j  for each j.
//   memory_j = sum_S x[S][j] (act_S * inflight_j + psf * private params_S)
//            + psf * sum_{shared groups g} bytes_g y[g][j] <= memory(device_j),
//     y[g][j] >= x[S][j] for every S touching g (groups touched by a single
//     super-node are folded into its private bytes). Exact.
//
// Communication is modelled per tensor (one original node's output) and its
// consumer super-nodes. Different edge sizes of one tensor are handled with
// "byte levels": consumers sorted by bytes b_1 > ... > b_L, level i = the
// consumers with bytes >= b_i, and the charge sum_i (b_i - b_{i+1}) * [some
// level-i consumer qualifies] equals the largest qualifying edge, as in
// CostModel::Evaluate. All charges are doubled (forward + backward).
//  - RELAY (exact): c >= u[A][j] - u[B][j] for B in the level; charged on both
//    sides of boundary j with the link (j, j+1).
//  - DIRECT receiver at stage b: r >= x[B][b] + u[A][b-1] - 1. Its link
//    depends on the producer's stage a; the charge uses g(a) = min_{a'' <= a}
//    t(a'', b), the largest lower envelope non-increasing in a, written as
//    g(b-1) * r + sum_{a'} (g(a') - g(a'+1)) * z_{a'} with
//    z_{a'} >= r + u[A][a'] - 1. Exact when links never get faster further
//    back (any homogeneous cluster, hosts in stage order); a lower bound
//    otherwise.
//  - DIRECT producer at stage a: o >= x[A][a] - u[B][a]. With one byte level
//    it pays h(f) for the farthest receiving stage f, h(b) = min_{b'' >= b}
//    t(a, b'') written with thresholds q_{b'} >= x[A][a] - u[B][b'] (exact
//    when links never get faster further ahead); with several levels it pays
//    the largest tensor over the fastest outgoing link (a lower bound).
// Tensors with the same producer super-node and consumer set share their
// indicator variables (coefficients add up). Only u is integer; every other
// variable is continuous in [0, 1] and pushed to max(0, its lower bounds)
// in any optimum that matters (all charges are non-negative).
//
// The MILP cost is never above the true cost, so CBC's bound is valid for
// the contracted problem; every incumbent CBC reports is re-evaluated exactly
// with MakePartition and the best one wins.
//
// Lower bound validity: CBC's best possible objective is reported only when
// the contraction had no lossy step (free-source merges are corrected with
// FreeSourceFallbackBound, see contraction.h). After a lossy (target-size)
// contraction a second, uncontracted-but-exact model is solved with the
// remaining time, warm-started from the incumbent, to obtain a valid bound;
// when that model would be too large, only BalanceLowerBound and the chain
// DP's proven bound are reported.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "CbcEventHandler.hpp"
#include "CbcHeuristic.hpp"
#include "CbcHeuristicFPump.hpp"
#include "CbcHeuristicLocal.hpp"
#include "CbcHeuristicRINS.hpp"
#include "CbcModel.hpp"
#include "CglClique.hpp"
#include "CglFlowCover.hpp"
#include "CglGomory.hpp"
#include "CglKnapsackCover.hpp"
#include "CglMixedIntegerRounding2.hpp"
#include "CglProbing.hpp"
#include "ClpEventHandler.hpp"
#include "ClpSimplex.hpp"
#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "contraction.h"
#include "pipeplan/core/partition.h"
#include "pipeplan/core/status_macros.h"

namespace pipeplan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Above this many prefix variables (super-nodes x (stages - 1)) the presolve
// contracts lossily, and the exact bound model is not attempted.
constexpr int kTargetPrefixVars = 2400;
constexpr int kMaxExactPrefixVars = 12000;

struct Lin {
  std::vector<std::pair<int, double>> terms;
  double constant = 0;
};

// Link cost components between the devices of two stages (0 on one device).
struct Links {
  Links(const PartitionProblem& p) : k(p.num_stages()), rho(k * k, 0), lat(k * k, 0) {
    const Cluster& c = p.cost->cluster();
    for (int a = 0; a < k; ++a) {
      for (int b = 0; b < k; ++b) {
        const int da = p.stage_device[a], db = p.stage_device[b];
        if (da == db) continue;
        rho[a * k + b] = 1 / c.bandwidth(da, db);
        lat[a * k + b] = c.latency(da, db);
      }
    }
  }
  double t(int a, int b, double bytes) const { return bytes * rho[a * k + b] + lat[a * k + b]; }
  int k;
  std::vector<double> rho, lat;
};

class MilpModel {
 public:
  // `need`: optional per-stage lower bounds on communication that every split
  // at least as good as the incumbent meets (CommLowerBound).
  MilpModel(const PartitionProblem& problem, const Contraction& con, double t_lower,
            std::span<const double> need)
      : p_(problem), con_(con), k_(problem.num_stages()), m_(con.num_super), need_(need) {
    Build(t_lower);
  }

  int num_cols() const { return static_cast<int>(col_lb_.size()); }
  int num_rows() const { return static_cast<int>(row_lo_.size()); }
  int t_col() const { return t_col_; }
  double time_scale() const { return time_scale_; }

  void Load(OsiClpSolverInterface& solver) const {
    std::vector<int> rows, cols;
    std::vector<double> vals;
    rows.reserve(elems_.size());
    cols.reserve(elems_.size());
    vals.reserve(elems_.size());
    for (const auto& [r, c, v] : elems_) {
      rows.push_back(r);
      cols.push_back(c);
      vals.push_back(v);
    }
    CoinPackedMatrix matrix(/*colordered=*/true, rows.data(), cols.data(), vals.data(),
                            static_cast<CoinBigIndex>(vals.size()));
    matrix.setDimensions(num_rows(), num_cols());
    solver.loadProblem(matrix, col_lb_.data(), col_ub_.data(), col_obj_.data(), row_lo_.data(),
                       row_hi_.data());
    for (int c = 0; c < num_cols(); ++c) {
      if (is_int_[c]) solver.setInteger(c);
    }
  }

  // Full primal vector for a stage of every super-node (aux variables at
  // their smallest feasible values) and its MILP objective.
  std::vector<double> Primal(std::span<const int> stage_of_super, double* objective) const {
    std::vector<double> x(num_cols(), 0);
    for (int s = 0; s < m_; ++s) {
      for (int j = 0; j + 1 < k_; ++j) x[UCol(s, j)] = stage_of_super[s] <= j ? 1 : 0;
    }
    auto eval = [&](const Lin& l) {
      double v = l.constant;
      for (const auto& [c, a] : l.terms) v += a * x[c];
      return v;
    };
    for (int c = 0; c < num_cols(); ++c) {
      if (lower_exprs_[c].empty()) continue;
      double v = 0;
      for (const Lin& l : lower_exprs_[c]) v = std::max(v, eval(l));
      x[c] = std::min(v, col_ub_[c]);
    }
    double t = col_lb_[t_col_];
    for (const Lin& l : stage_time_) t = std::max(t, eval(l));
    x[t_col_] = t;
    *objective = t;
    return x;
  }

  std::vector<int> StagesFromPrimal(const double* x) const {
    std::vector<int> stage(m_, k_ - 1);
    for (int s = 0; s < m_; ++s) {
      for (int j = 0; j + 1 < k_; ++j) {
        if (x[UCol(s, j)] > 0.5) {
          stage[s] = j;
          break;
        }
      }
    }
    return stage;
  }

 private:
  int UCol(int s, int j) const { return u_base_ + s * (k_ - 1) + j; }
  // coef * u[s][j] with the fixed ends.
  void AddU(Lin& l, int s, int j, double coef) const {
    if (j < 0) return;
    if (j >= k_ - 1) {
      l.constant += coef;
      return;
    }
    l.terms.emplace_back(UCol(s, j), coef);
  }
  void AddX(Lin& l, int s, int j, double coef) const {
    AddU(l, s, j, coef);
    AddU(l, s, j - 1, -coef);
  }
  int AddCol(double lb, double ub, double obj, bool integer) {
    col_lb_.push_back(lb);
    col_ub_.push_back(ub);
    col_obj_.push_back(obj);
    is_int_.push_back(integer);
    lower_exprs_.emplace_back();
    return num_cols() - 1;
  }
  // lo <= sum terms + constant <= hi, duplicates merged.
  void AddRow(const Lin& l, double lo, double hi) {
    const int r = static_cast<int>(row_lo_.size());
    std::vector<std::pair<int, double>> t = l.terms;
    std::sort(t.begin(), t.end());
    bool any = false;
    for (size_t i = 0; i < t.size();) {
      size_t j = i;
      double v = 0;
      while (j < t.size() && t[j].first == t[i].first) v += t[j++].second;
      if (v != 0) {
        elems_.emplace_back(r, t[i].first, v);
        any = true;
      }
      i = j;
    }
    if (!any) {
      // Constant row: keep it only for infeasibility detection via bounds.
      if (l.constant < lo - 1e-9 || l.constant > hi + 1e-9) infeasible_constant_ = true;
      return;
    }
    row_lo_.push_back(lo - l.constant);
    row_hi_.push_back(hi - l.constant);
  }
  // aux >= expr (recorded for warm starts).
  void AddLower(int aux, Lin expr) {
    Lin row = expr;
    for (auto& t : row.terms) t.second = -t.second;
    row.constant = -row.constant;
    row.terms.emplace_back(aux, 1.0);
    AddRow(row, 0, kInf);
    lower_exprs_[aux].push_back(std::move(expr));
  }

  void Build(double t_lower);
  void BuildRelay(std::vector<Lin>& stage);
  void BuildDirect(std::vector<Lin>& stage);

  // Tensors grouped by (producer super-node, consumer set).
  struct Tensor {
    int producer;
    std::vector<std::pair<int, double>> consumers;  // (super-node, bytes), bytes desc
  };
  std::vector<Tensor> Tensors() const;

  const PartitionProblem& p_;
  const Contraction& con_;
  const int k_, m_;
  std::span<const double> need_;
  int u_base_ = 0, t_col_ = 0;
  double time_scale_ = 1;
  std::vector<double> col_lb_, col_ub_, col_obj_, row_lo_, row_hi_;
  std::vector<char> is_int_;
  std::vector<std::tuple<int, int, double>> elems_;
  std::vector<std::vector<Lin>> lower_exprs_;
  std::vector<Lin> stage_time_, extra_;

 public:
  bool infeasible_constant_ = false;
};

std::vector<MilpModel::Tensor> MilpModel::Tensors() const {
  const Graph& g = p_.graph();
  const CostModel& cost = *p_.cost;
  std::vector<Tensor> out;
  absl::flat_hash_map<int, double> by_super;
  for (int v = 0; v < g.num_nodes(); ++v) {
    const int a = con_.super_of_node[v];
    by_super.clear();
    for (int e : g.out_edges(v)) {
      const int b = con_.super_of_node[g.edge(e).dst];
      if (b == a) continue;
      double& bytes = by_super[b];
      bytes = std::max(bytes, cost.edge_bytes(e));
    }
    if (by_super.empty()) continue;
    Tensor t{a, {by_super.begin(), by_super.end()}};
    std::sort(t.consumers.begin(), t.consumers.end(), [](const auto& x, const auto& y) {
      return x.second != y.second ? x.second > y.second : x.first < y.first;
    });
    out.push_back(std::move(t));
  }
  return out;
}

void MilpModel::Build(double t_lower) {
  const CostModel& cost = *p_.cost;
  // Columns: u first, then T, then auxiliaries as they come.
  u_base_ = 0;
  for (int s = 0; s < m_; ++s) {
    for (int j = 0; j + 1 < k_; ++j) AddCol(0, 1, 0, true);
  }
  time_scale_ = t_lower > 0 ? t_lower : 1;
  t_col_ = AddCol(std::max(0.0, t_lower) / time_scale_, kInf, 1, false);

  for (int s = 0; s < m_; ++s) {
    for (int j = 0; j + 2 < k_; ++j) {
      Lin l;
      AddU(l, s, j, 1);
      AddU(l, s, j + 1, -1);
      AddRow(l, -kInf, 0);
    }
  }
  for (const auto& [a, b] : con_.edges) {
    for (int j = 0; j + 1 < k_; ++j) {
      Lin l;
      AddU(l, b, j, 1);
      AddU(l, a, j, -1);
      AddRow(l, -kInf, 0);
    }
  }
  for (int j = 0; j < k_; ++j) {
    Lin l;
    for (int s = 0; s < m_; ++s) AddX(l, s, j, 1);
    AddRow(l, 1, kInf);
  }

  std::vector<Lin> stage(k_);
  for (int j = 0; j < k_; ++j) {
    const double slow = cost.slowdown(p_.stage_device[j]);
    for (int s = 0; s < m_; ++s) {
      if (con_.work_ref[s] > 0) AddX(stage[j], s, j, con_.work_ref[s] * slow);
    }
  }
  // T >= compute_j + need_j: communication the LP relaxation would
  // otherwise spread thin.
  if (static_cast<int>(need_.size()) == k_) {
    for (int j = 0; j < k_; ++j) {
      if (need_[j] <= 0) continue;
      Lin l = stage[j];
      l.constant += need_[j];
      extra_.push_back(std::move(l));
    }
  }
  if (cost.options().comm_model == CommModel::kRelay) {
    BuildRelay(stage);
  } else {
    BuildDirect(stage);
  }
  // Times are modelled in units of time_scale_ (about the optimum) so that
  // CBC's absolute tolerances (cutoff increment, gaps) are meaningless next
  // to real differences.
  for (Lin& l : extra_) stage.push_back(std::move(l));
  extra_.clear();
  for (Lin& l : stage) {
    for (auto& t : l.terms) t.second /= time_scale_;
    l.constant /= time_scale_;
  }
  for (size_t j = 0; j < stage.size(); ++j) {
    Lin row = stage[j];
    for (auto& t : row.terms) t.second = -t.second;
    row.constant = -row.constant;
    row.terms.emplace_back(t_col_, 1);
    AddRow(row, 0, kInf);
  }
  stage_time_ = std::move(stage);

  // Memory.
  const Graph& g = p_.graph();
  const double psf = cost.param_state_factor();
  std::vector<std::vector<int>> touching(g.num_param_groups());
  for (int s = 0; s < m_; ++s) {
    for (int grp : con_.param_groups[s]) touching[grp].push_back(s);
  }
  std::vector<double> private_params(m_, 0);
  std::vector<int> shared;
  double all_params = 0, all_act = 0;
  for (int grp = 0; grp < g.num_param_groups(); ++grp) {
    all_params += g.param_group_bytes(grp);
    if (touching[grp].size() == 1) {
      private_params[touching[grp][0]] += g.param_group_bytes(grp);
    } else if (touching[grp].size() > 1) {
      shared.push_back(grp);
    }
  }
  for (int s = 0; s < m_; ++s) all_act += con_.activation_bytes[s];
  for (int j = 0; j < k_; ++j) {
    const double cap = StageMemoryCap(p_, j);
    const double inflight = p_.stage_inflight[j];
    if (all_act * inflight + psf * all_params <= cap) continue;
    Lin l;
    for (int s = 0; s < m_; ++s) {
      const double need = con_.activation_bytes[s] * inflight + psf * private_params[s];
      if (need == 0) continue;
      AddX(l, s, j, need);
      if (need > cap) {
        Lin fix;  // S can never sit in stage j
        AddX(fix, s, j, 1);
        AddRow(fix, -kInf, 0);
      }
    }
    for (int grp : shared) {
      const int y = AddCol(0, 1, 0, false);
      for (int s : touching[grp]) {
        Lin e;
        AddX(e, s, j, 1);
        AddLower(y, std::move(e));
      }
      l.terms.emplace_back(y, psf * g.param_group_bytes(grp));
    }
    // Normalise to keep the row well scaled.
    const double scale = 1 / cap;
    for (auto& t : l.terms) t.second *= scale;
    l.constant *= scale;
    AddRow(l, -kInf, 1);
  }
}

void MilpModel::BuildRelay(std::vector<Lin>& stage) {
  const Links links(p_);
  // (producer, consumer set) -> coefficient per boundary.
  std::map<std::pair<int, std::vector<int>>, std::vector<double>> agg;
  for (const Tensor& t : Tensors()) {
    const int levels = static_cast<int>(t.consumers.size());
    std::vector<int> set;
    for (int i = 0; i < levels; ++i) {
      set.push_back(t.consumers[i].first);
      const double b = t.consumers[i].second;
      const double next = i + 1 < levels ? t.consumers[i + 1].second : 0;
      if (next == b) continue;  // same level as the next consumer
      std::vector<int> key = set;
      std::sort(key.begin(), key.end());
      auto& coef = agg[{t.producer, key}];
      coef.resize(k_ - 1, 0);
      for (int j = 0; j + 1 < k_; ++j) {
        coef[j] += 2 * ((b - next) * links.rho[j * k_ + j + 1] +
                        (i + 1 == levels ? links.lat[j * k_ + j + 1] : 0));
      }
    }
  }
  for (const auto& [key, coef] : agg) {
    const auto& [a, set] = key;
    for (int j = 0; j + 1 < k_; ++j) {
      if (coef[j] <= 0) continue;
      const int c = AddCol(0, 1, 0, false);
      for (int b : set) {
        Lin e;
        AddU(e, a, j, 1);
        AddU(e, b, j, -1);
        AddLower(c, std::move(e));
      }
      stage[j].terms.emplace_back(c, coef[j]);
      stage[j + 1].terms.emplace_back(c, coef[j]);
    }
  }
}

void MilpModel::BuildDirect(std::vector<Lin>& stage) {
  const Links links(p_);
  const int k = k_;
  struct Agg {
    std::vector<double> recv;    // [b]: coefficient of r_b
    std::vector<double> recv_z;  // [b * k + a']: threshold z
    std::vector<double> send;    // [a]: coefficient of o_a
    std::vector<double> send_q;  // [a * k + b']: threshold q
  };
  std::map<std::pair<int, std::vector<int>>, Agg> agg;
  auto get = [&](int a, std::vector<int> key) -> Agg& {
    std::sort(key.begin(), key.end());
    Agg& g = agg[{a, std::move(key)}];
    if (g.recv.empty()) {
      g.recv.assign(k, 0);
      g.recv_z.assign(k * k, 0);
      g.send.assign(k, 0);
      g.send_q.assign(k * k, 0);
    }
    return g;
  };
  std::vector<double> env(k);
  for (const Tensor& t : Tensors()) {
    const int levels = static_cast<int>(t.consumers.size());
    const bool single_level = t.consumers.front().second == t.consumers.back().second;
    std::vector<int> set;
    for (int i = 0; i < levels; ++i) {
      set.push_back(t.consumers[i].first);
      const double b = t.consumers[i].second;
      const double next = i + 1 < levels ? t.consumers[i + 1].second : 0;
      if (next == b) continue;
      const bool last = i + 1 == levels;
      const double db = b - next;
      Agg& g = get(t.producer, set);
      // Receiver at stage rb: envelope over the producer's stage, for the
      // bytes part and the latency part separately (both non-increasing).
      for (int rb = 1; rb < k; ++rb) {
        double run_rho = kInf, run_lat = kInf;
        std::vector<double> gr(rb), gl(rb);
        for (int a = 0; a < rb; ++a) {
          run_rho = std::min(run_rho, links.rho[a * k + rb]);
          run_lat = std::min(run_lat, links.lat[a * k + rb]);
          gr[a] = run_rho;
          gl[a] = run_lat;
        }
        auto charge = [&](int a) { return db * gr[a] + (last ? gl[a] : 0); };
        g.recv[rb] += 2 * charge(rb - 1);
        for (int a = 0; a + 1 < rb; ++a) g.recv_z[rb * k + a] += 2 * (charge(a) - charge(a + 1));
      }
      // Producer at stage a.
      if (single_level) {
        if (!last) continue;  // single level: only the full set exists
        for (int a = 0; a + 1 < k; ++a) {
          // h(b) = min_{b'' >= b} t(a, b''), non-decreasing in b.
          double run = kInf;
          for (int bb = k - 1; bb > a; --bb) {
            run = std::min(run, links.t(a, bb, b));
            env[bb] = run;
          }
          g.send[a] += 2 * env[a + 1];
          for (int bp = a + 1; bp + 1 < k; ++bp)
            g.send_q[a * k + bp] += 2 * (env[bp + 1] - env[bp]);
        }
      } else {
        for (int a = 0; a + 1 < k; ++a) {
          double min_rho = kInf, min_lat = kInf;
          for (int bb = a + 1; bb < k; ++bb) {
            min_rho = std::min(min_rho, links.rho[a * k + bb]);
            min_lat = std::min(min_lat, links.lat[a * k + bb]);
          }
          g.send[a] += 2 * (db * min_rho + (last ? min_lat : 0));
        }
      }
    }
  }
  for (const auto& [key, g] : agg) {
    const auto& [a, set] = key;
    for (int rb = 1; rb < k; ++rb) {
      bool any = g.recv[rb] > 0;
      for (int ap = 0; ap + 1 < rb; ++ap) any |= g.recv_z[rb * k + ap] > 0;
      if (!any) continue;
      const int r = AddCol(0, 1, 0, false);
      for (int b : set) {
        Lin e;  // x[B][rb] + u[A][rb-1] - 1
        AddX(e, b, rb, 1);
        AddU(e, a, rb - 1, 1);
        e.constant -= 1;
        AddLower(r, std::move(e));
      }
      if (g.recv[rb] > 0) stage[rb].terms.emplace_back(r, g.recv[rb]);
      for (int ap = 0; ap + 1 < rb; ++ap) {
        const double c = g.recv_z[rb * k + ap];
        if (c <= 0) continue;
        const int z = AddCol(0, 1, 0, false);
        Lin e;  // r + u[A][a'] - 1
        e.terms.emplace_back(r, 1);
        AddU(e, a, ap, 1);
        e.constant -= 1;
        AddLower(z, std::move(e));
        stage[rb].terms.emplace_back(z, c);
      }
    }
    for (int sa = 0; sa + 1 < k; ++sa) {
      if (g.send[sa] > 0) {
        const int o = AddCol(0, 1, 0, false);
        for (int b : set) {
          Lin e;  // x[A][sa] - u[B][sa]
          AddX(e, a, sa, 1);
          AddU(e, b, sa, -1);
          AddLower(o, std::move(e));
        }
        stage[sa].terms.emplace_back(o, g.send[sa]);
      }
      for (int bp = sa + 1; bp + 1 < k; ++bp) {
        const double c = g.send_q[sa * k + bp];
        if (c <= 0) continue;
        const int q = AddCol(0, 1, 0, false);
        for (int b : set) {
          Lin e;  // x[A][sa] - u[B][bp]
          AddX(e, a, sa, 1);
          AddU(e, b, bp, -1);
          AddLower(q, std::move(e));
        }
        stage[sa].terms.emplace_back(q, c);
      }
    }
  }
}

// When a CBC run must stop: cancellation, or `stop_at` (the problem's
// deadline minus a margin for the work after CBC returns).
struct StopCheck {
  const PartitionProblem* problem = nullptr;
  absl::Time stop_at = absl::InfiniteFuture();
  // Set when an LP was interrupted: CBC may then take a node for infeasible,
  // so its bound and infeasibility proof are not to be trusted.
  bool lp_interrupted = false;
  bool Expired() const {
    return (problem->cancelled != nullptr && problem->cancelled->load(std::memory_order_relaxed)) ||
           absl::Now() >= stop_at;
  }
};

// Interrupts Clp inside an LP (root LP, node LPs, strong branching), which
// CBC's own time limit cannot do.
class ClpStop : public ClpEventHandler {
 public:
  explicit ClpStop(StopCheck* check) : check_(check) {}
  ClpStop(const ClpStop&) = default;
  ClpEventHandler* clone() const override { return new ClpStop(*this); }
  int event(Event which) override {
    if (which != endOfIteration) return -1;
    if (!check_->Expired()) return -1;
    check_->lp_interrupted = true;
    return 0;
  }

 private:
  StopCheck* check_;
};

// Stops CBC on cancellation or deadline and records every incumbent.
class StopHandler : public CbcEventHandler {
 public:
  StopHandler(const StopCheck* check, std::vector<std::vector<double>>* solutions)
      : check_(check), solutions_(solutions) {}
  StopHandler(const StopHandler&) = default;
  CbcEventHandler* clone() const override { return new StopHandler(*this); }
  CbcAction event(CbcEvent which) override {
    if ((which == solution || which == heuristicSolution) && model_ != nullptr &&
        model_->bestSolution() != nullptr) {
      const int n = model_->solver()->getNumCols();
      solutions_->emplace_back(model_->bestSolution(), model_->bestSolution() + n);
    }
    return check_->Expired() ? stop : noAction;
  }

 private:
  const StopCheck* check_;
  std::vector<std::vector<double>>* solutions_;
};

struct CbcOutcome {
  bool proven_infeasible = false;
  bool proven_optimal = false;
  double bound = -kInf;  // valid for the model
  int64_t nodes = 0;
  std::vector<std::vector<int>> candidates;  // stage of every super-node
  std::string stop;                          // why it stopped, for the note
};

// Phase timings through the caller's log (PartitionProblem::log), if any.
void Trace(const PartitionProblem& problem, const char* what, absl::Time since) {
  if (problem.log) {
    problem.log(
        absl::StrFormat("[milp] %-28s %8.3fs", what, absl::ToDoubleSeconds(absl::Now() - since)));
  }
}

CbcOutcome RunCbc(const PartitionProblem& problem, const MilpModel& model,
                  const std::vector<int>* warm_super, absl::Time stop_at) {
  CbcOutcome out;
  if (model.infeasible_constant_) {
    out.proven_infeasible = true;
    return out;
  }
  const absl::Time t0 = absl::Now();
  StopCheck check{.problem = &problem, .stop_at = stop_at};
  const bool limited = stop_at != absl::InfiniteFuture();
  OsiClpSolverInterface solver;
  solver.messageHandler()->setLogLevel(0);
  model.Load(solver);
  {
    ClpStop clp_stop(&check);
    solver.getModelPtr()->passInEventHandler(&clp_stop);  // cloned
  }
  CbcModel cbc(solver);
  // CBC's own log would go to stdout; the phases that matter are traced
  // through the caller's log instead.
  cbc.setLogLevel(0);
  cbc.messageHandler()->setLogLevel(0);
  cbc.solver()->messageHandler()->setLogLevel(0);
  cbc.setUseElapsedTime(true);
  cbc.setAllowableFractionGap(std::max(problem.relative_gap, 1e-9));
  cbc.setAllowableGap(1e-12);
  cbc.setCutoffIncrement(1e-10);
  Trace(problem, "load", t0);

  CglProbing probing;
  probing.setUsingObjective(1);
  probing.setMaxPass(1);
  probing.setMaxProbe(100);
  probing.setMaxLook(50);
  probing.setRowCuts(3);
  CglGomory gomory;
  gomory.setLimit(300);
  CglKnapsackCover knapsack;
  CglClique clique;
  clique.setStarCliqueReport(false);
  clique.setRowCliqueReport(false);
  CglMixedIntegerRounding2 mir;
  CglFlowCover flow;
  cbc.addCutGenerator(&probing, -1, "Probing");
  cbc.addCutGenerator(&gomory, -1, "Gomory");
  cbc.addCutGenerator(&knapsack, -1, "Knapsack");
  cbc.addCutGenerator(&clique, -1, "Clique");
  cbc.addCutGenerator(&mir, -1, "MIR2");
  cbc.addCutGenerator(&flow, -1, "FlowCover");
  CbcRounding rounding(cbc);
  cbc.addHeuristic(&rounding);
  CbcHeuristicFPump pump(cbc);
  // FPump, local search and RINS run sub-solves that do not look at the
  // deadline; use them only when there is no deadline.
  if (!limited) cbc.addHeuristic(&pump);
  CbcHeuristicLocal local(cbc);
  if (!limited) cbc.addHeuristic(&local);
  CbcHeuristicRINS rins(cbc);
  if (!limited) cbc.addHeuristic(&rins);

  std::vector<std::vector<double>> solutions;
  StopHandler handler(&check, &solutions);
  cbc.passInEventHandler(&handler);

  // Solve the root LP first: its value is a valid bound even when the
  // search is stopped early (CBC's own best-possible value is not reliable
  // when the limit interrupts the root).
  const absl::Time t1 = absl::Now();
  cbc.initialSolve();
  Trace(problem, "root lp", t1);
  double lp_bound = -kInf;
  if (check.lp_interrupted) {
    out.stop = "stopped in the root LP";
  } else if (cbc.solver()->isProvenOptimal()) {
    lp_bound = cbc.solver()->getObjValue();
  } else if (cbc.solver()->isProvenPrimalInfeasible() && warm_super == nullptr) {
    out.proven_infeasible = true;
    out.stop = "infeasible";
    return out;
  }
  if (warm_super != nullptr) {
    double objective = 0;
    std::vector<double> x = model.Primal(*warm_super, &objective);
    // Not checked by CBC (that re-solves the LP): Primal() is feasible by
    // construction, which the brute-force tests exercise.
    cbc.setBestSolution(x.data(), static_cast<int>(x.size()), objective, /*check=*/false);
  }
  auto finish_bound = [&] {
    out.bound = std::isfinite(lp_bound) ? lp_bound * model.time_scale() : -kInf;
  };
  if (check.Expired()) {
    if (out.stop.empty()) out.stop = "stopped after the root LP";
    finish_bound();
    return out;
  }
  if (limited) {
    const double left = absl::ToDoubleSeconds(stop_at - absl::Now());
    cbc.setMaximumSeconds(std::max(0.001, left));
    // CBC checks its limit between root cut passes and nodes: with little
    // time, few passes and little strong branching.
    cbc.setMaximumCutPassesAtRoot(left < 1 ? 2 : left < 10 ? 5 : 10);
    if (left < 2) {
      cbc.setNumberStrong(left < 0.5 ? 0 : 2);
      cbc.setNumberBeforeTrust(left < 0.5 ? 0 : 2);
    }
  }
  const absl::Time t2 = absl::Now();
  cbc.branchAndBound();
  Trace(problem, "branch and bound", t2);

  out.nodes = cbc.getNodeCount();
  const bool trusted = !check.lp_interrupted && !cbc.isAbandoned();
  out.proven_infeasible = trusted && cbc.isProvenInfeasible() && cbc.bestSolution() == nullptr;
  out.proven_optimal = trusted && cbc.isProvenOptimal() && cbc.bestSolution() != nullptr;
  if (cbc.bestSolution() != nullptr) {
    solutions.emplace_back(cbc.bestSolution(), cbc.bestSolution() + model.num_cols());
  }
  if (out.proven_optimal) {
    out.stop = "optimal";
  } else if (out.proven_infeasible) {
    out.stop = "infeasible";
  } else if (problem.cancelled != nullptr && problem.cancelled->load()) {
    out.stop = "cancelled";
  } else if (check.Expired() || cbc.maximumSecondsReached()) {
    out.stop = "deadline";
  } else {
    out.stop = "stopped";
  }
  if (!out.proven_infeasible) {
    finish_bound();
    double bound = lp_bound;
    if (out.proven_optimal || (trusted && cbc.getNodeCount() > 0 && std::isfinite(lp_bound))) {
      bound = std::max(bound, cbc.getBestPossibleObjValue());
    }
    out.bound = std::isfinite(bound) ? bound * model.time_scale() : -kInf;
  }
  for (const auto& s : solutions) {
    if (static_cast<int>(s.size()) == model.num_cols())
      out.candidates.push_back(model.StagesFromPrimal(s.data()));
  }
  Trace(problem, "cbc total", t0);
  return out;
}

// Smallest factor by which every device's memory must grow for some split of
// the topological order into contiguous stages to fit, and the bytes that
// split's fullest stage needs. Greedy maximal stages are optimal for a fixed
// factor because stage memory only grows with the stage.
std::pair<double, double> MemoryNeed(const PartitionProblem& problem) {
  const CostModel& cost = *problem.cost;
  const Graph& g = cost.graph();
  const int n = g.num_nodes(), k = problem.num_stages();
  const double psf = cost.param_state_factor();
  auto fits = [&](double factor, double* fullest) {
    int pos = 0;
    std::vector<int> seen(g.num_param_groups(), -1);
    for (int j = 0; j < k; ++j) {
      const double cap = StageMemoryCap(problem, j) * factor;
      double act = 0, params = 0;
      const int start = pos;
      while (pos < n - (k - 1 - j)) {
        const int v = g.topo_order()[pos];
        double add_params = 0;
        const int grp = g.param_group(v);
        if (grp >= 0 && seen[grp] != j) add_params = g.param_group_bytes(grp);
        const double mem = (act + cost.activation_bytes(v)) * problem.stage_inflight[j] +
                           psf * (params + add_params);
        if (mem > cap && pos > start) break;
        if (mem > cap) return false;
        act += cost.activation_bytes(v);
        params += add_params;
        if (grp >= 0) seen[grp] = j;
        ++pos;
        if (fullest) *fullest = std::max(*fullest, mem);
      }
      if (pos == start) return false;
    }
    return pos == n;
  };
  double lo = 1, hi = 2;
  while (!fits(hi, nullptr)) {
    lo = hi;
    hi *= 2;
    if (hi > 1e15) return {kInf, kInf};
  }
  for (int it = 0; it < 50; ++it) {
    const double mid = (lo + hi) / 2;
    (fits(mid, nullptr) ? hi : lo) = mid;
  }
  double fullest = 0;
  fits(hi, &fullest);
  return {hi, fullest};
}

// A lower bound on the bottleneck from communication every stage must pay,
// over the splits of an exact (non-lossy) contraction `c`.
//
// Take a split with bottleneck <= T. Stage j does at most
// cap_j = (T - need_j) / slowdown_j work, where need_j is a lower bound on
// its communication, so the stages 0..j hold at most P_j = sum_{i<=j} cap_i
// work and j..k-1 at most Q_j = sum_{i>=j} cap_i. A super-node X in stage j
// has all its ancestors in stages <= j and all its descendants in stages
// >= j: anc(X) <= P_j and desc(X) <= Q_j (anc/desc: work of X with all its
// ancestors/descendants). Walking back from any super-node of stage j >= 1
// through predecessors inside stage j ends at a source or at an edge A -> B
// with B in stage j and A in stage < j, which stage j receives; walking
// forward, stage j <= k-2 sends an edge or holds a sink. A source may sit in
// stage j only if at least j super-nodes do not descend from it (one for
// each earlier stage), a sink only if k-1-j super-nodes are not its
// ancestors. Hence need_j >= the cheapest qualifying receive + the cheapest
// qualifying send, each charged on the fastest link the cost model could
// use. T is impossible when some need_j > T, some stage has no qualifying
// edge, or sum_j cap_j < total work; every test only gets stricter as T
// falls, so bisection finds the bound. need_j at the incumbent's objective
// (`ub`) also bounds stage j's communication in every split at least as
// good as the incumbent, which the model uses as rows.
//
// When `c` merged free sources the bound holds for its splits; the caller
// takes min(bound, FreeSourceFallbackBound) for the original problem.
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

struct CommBound {
  double bound = 0;
  std::vector<double> need_at_ub;  // per stage; empty when not computed
};

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

class MilpPartitioner : public Partitioner {
 public:
  std::string_view name() const override { return "milp"; }

  absl::StatusOr<Partition> Solve(const PartitionProblem& problem) const override {
    const Graph& g = problem.graph();
    const int n = g.num_nodes(), k = problem.num_stages();
    PIPEPLAN_RETURN_IF_ERROR(ValidateProblem(problem));
    double proven_lb = BalanceLowerBound(problem);

    // Incumbent: the caller's warm start, else the chain DP.
    std::optional<Partition> best;
    auto offer = [&](std::vector<int> stage_of_node) {
      auto p = MakePartition(problem, std::move(stage_of_node));
      if (!p.ok() || !p->fits_memory) return;
      if (!best || p->objective < best->objective) best = std::move(*p);
    };
    int64_t nodes = 0;
    if (!problem.warm_start.empty()) {
      offer(std::vector<int>(problem.warm_start.begin(), problem.warm_start.end()));
    }
    const absl::Time t0 = absl::Now();
    // CBC stops a little before the deadline to leave time for the work
    // after it (re-evaluating incumbents, freeing the model).
    absl::Time stop_at = problem.deadline;
    if (stop_at != absl::InfiniteFuture()) {
      const double budget = std::max(0.0, absl::ToDoubleSeconds(stop_at - t0));
      stop_at -= absl::Seconds(std::clamp(0.02 * budget, 0.01, 0.1));
    }
    if (!best) {
      auto dp = MakeChainDpPartitioner()->Solve(problem);
      if (dp.ok()) {
        proven_lb = std::max(proven_lb, std::min(dp->lower_bound, dp->objective));
        nodes += dp->nodes_explored;
        if (dp->fits_memory) offer(dp->stage_of_node);
      }
    }
    const absl::Time t1 = absl::Now();

    // Communication bound on the exact contraction (free sources only).
    Contraction exact_con = Contract(problem, ContractionOptions{});
    const bool exact_merged = exact_con.merged_free_sources;
    CommBound comm;
    if (best) {
      comm = CommLowerBound(problem, exact_con, proven_lb, best->objective);
      double b = comm.bound;
      if (exact_con.merged_free_sources) b = std::min(b, FreeSourceFallbackBound(problem));
      proven_lb = std::max(proven_lb, b);
    }
    const double balance_lb = proven_lb;
    Trace(problem, "comm bound", t1);
    auto seconds_left = [&] { return absl::ToDoubleSeconds(stop_at - absl::Now()); };

    // Phase 1: contracted model (lossy when the graph is large, or when the
    // time is short).
    const double size_scale = std::clamp(seconds_left() / 2, 0.1, 1.0);
    const int target =
        std::max(40, static_cast<int>(kTargetPrefixVars * size_scale) / std::max(1, k - 1));
    ContractionOptions copt;
    copt.merge_free_sources = true;
    double total_work = 0, largest = 0;
    for (int v = 0; v < n; ++v) {
      total_work += problem.cost->work_ref(v);
      largest = std::max(largest, problem.cost->work_ref(v));
    }
    copt.target_super_nodes = target;
    copt.max_super_work = std::max(largest, total_work / (6.0 * k));
    if (best) copt.keep_cuts = best->stage_of_node;
    const absl::Time ct = absl::Now();
    Contraction con = Contract(problem, copt);
    Trace(problem, "contract", ct);

    bool bound_valid = false;  // model_bound below holds for the original
    double model_bound = -kInf;
    bool proven_infeasible = false;
    std::string how, stop = "skipped";
    int super_nodes = 0;
    double cbc_seconds = 0;
    const bool gap_closed =
        best && best->objective - proven_lb <= problem.relative_gap * best->objective;
    auto run = [&](const Contraction& c, absl::Time until) {
      const absl::Time b0 = absl::Now();
      // The communication rows hold for splits of the free-source
      // contraction, which every model below merges unless it is the retry
      // without that merge.
      const bool use_need = c.merged_free_sources == exact_merged;
      const MilpModel model(
          problem, c, proven_lb,
          use_need ? std::span<const double>(comm.need_at_ub) : std::span<const double>());
      Trace(problem, "build model", b0);
      std::vector<int> warm;
      const std::vector<int>* warm_ptr = nullptr;
      if (best && c.Restrict(best->stage_of_node, &warm)) warm_ptr = &warm;
      const absl::Time c0 = absl::Now();
      CbcOutcome out = RunCbc(problem, model, warm_ptr, until);
      cbc_seconds += absl::ToDoubleSeconds(absl::Now() - c0);
      nodes += out.nodes;
      for (const auto& cand : out.candidates) offer(c.Expand(cand));
      super_nodes = c.num_super;
      how = absl::StrFormat("%d super-nodes%s, %d rows, %d cols", c.num_super,
                            c.lossy ? " (lossy)" : "", model.num_rows(), model.num_cols());
      stop = out.stop;
      return out;
    };
    auto absorb_bound = [&](const Contraction& c, const CbcOutcome& o) {
      if (c.lossy) return;
      if (o.proven_infeasible) {
        if (!c.merged_free_sources) proven_infeasible = true;
        return;
      }
      double b = o.bound;
      if (c.merged_free_sources) b = std::min(b, FreeSourceFallbackBound(problem));
      model_bound = std::max(model_bound, b);
      bound_valid = true;
    };
    // The exact model that gives a bound after a lossy phase 1, when it is
    // small enough for the time left.
    auto exact_fits = [&](const Contraction& c) {
      const double scale = std::clamp(seconds_left() / 5, 0.0, 1.0);
      return static_cast<int64_t>(c.num_super) * (k - 1) <= kMaxExactPrefixVars * scale &&
             seconds_left() > 0.3;
    };
    if (!gap_closed && !problem.ShouldStop()) {
      // After a lossy contraction keep half of the time for the exact model.
      absl::Time until = stop_at;
      if (con.lossy && stop_at != absl::InfiniteFuture() && exact_fits(exact_con)) {
        until = absl::Now() + (stop_at - absl::Now()) / 2;
      }
      CbcOutcome out = run(con, until);
      absorb_bound(con, out);

      // Phase 2: a valid bound (and maybe a better split) from an exact model.
      const bool need_exact = (con.lossy || (out.proven_infeasible && con.merged_free_sources)) &&
                              !problem.ShouldStop();
      if (need_exact) {
        const bool retry = out.proven_infeasible && con.merged_free_sources && !con.lossy;
        ContractionOptions exact;
        exact.merge_free_sources = !retry;
        Contraction con2 = retry ? Contract(problem, exact) : std::move(exact_con);
        if (exact_fits(con2)) {
          CbcOutcome out2 = run(con2, stop_at);
          absorb_bound(con2, out2);
        } else {
          stop = absl::StrCat(stop, "; exact model skipped (", con2.num_super, " super-nodes)");
        }
      }
    } else if (gap_closed) {
      stop = "communication bound closed the gap";
    } else {
      stop = "deadline before the MILP";
    }

    if (!best) {
      if (proven_infeasible) {
        const auto [factor, bytes] = MemoryNeed(problem);
        return absl::FailedPreconditionError(absl::StrFormat(
            "no split into %d stages fits in memory (proven by the MILP); the best split of a "
            "topological order needs %.4g bytes (%.2f GiB) on its fullest stage, %.3gx the "
            "devices' memory",
            k, bytes, bytes / (1 << 30), factor));
      }
      if (problem.cancelled != nullptr && problem.cancelled->load()) {
        return absl::CancelledError("MILP cancelled before finding a split that fits");
      }
      if (problem.ShouldStop()) {
        return absl::DeadlineExceededError("MILP reached its deadline before finding a split");
      }
      return absl::FailedPreconditionError(
          "MILP found no split that fits in memory and could not prove infeasibility");
    }
    Partition result = std::move(*best);
    result.contracted_nodes = super_nodes;
    double lb = balance_lb;
    if (bound_valid) lb = std::max(lb, model_bound);
    result.lower_bound = std::min(lb, result.objective);
    result.nodes_explored = nodes;
    const double gap =
        result.objective > 0 ? (result.objective - result.lower_bound) / result.objective : 0;
    result.note = absl::StrFormat("milp: %s; %s; gap %.3g (bound: %s); %.2fs (cbc %.2fs)",
                                  how.empty() ? "no model" : how, stop, gap,
                                  bound_valid && model_bound >= balance_lb  ? "model"
                                  : balance_lb > BalanceLowerBound(problem) ? "communication/DP"
                                                                            : "balance",
                                  absl::ToDoubleSeconds(absl::Now() - t0), cbc_seconds);
    return result;
  }
};

}  // namespace

std::unique_ptr<Partitioner> MakeMilpPartitioner() { return std::make_unique<MilpPartitioner>(); }

}  // namespace pipeplan
