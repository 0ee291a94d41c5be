#include "milp_model.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "CoinPackedMatrix.hpp"
#include "OsiClpSolverInterface.hpp"
#include "absl/container/flat_hash_map.h"

namespace pipeplan::milp_internal {

Links::Links(const PartitionProblem& p) : k(p.num_stages()), rho(k * k, 0), lat(k * k, 0) {
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

MilpModel::MilpModel(const PartitionProblem& problem, const Contraction& con, double t_lower,
                     std::span<const double> need)
    : p_(problem), con_(con), k_(problem.num_stages()), m_(con.num_super), need_(need) {
  Build(t_lower);
}

void MilpModel::Load(OsiClpSolverInterface& solver) const {
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

std::vector<double> MilpModel::Primal(std::span<const int> stage_of_super,
                                      double* objective) const {
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

std::vector<int> MilpModel::StagesFromPrimal(const double* x) const {
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

void MilpModel::AddU(Lin& l, int s, int j, double coef) const {
  if (j < 0) return;
  if (j >= k_ - 1) {
    l.constant += coef;
    return;
  }
  l.terms.emplace_back(UCol(s, j), coef);
}

void MilpModel::AddX(Lin& l, int s, int j, double coef) const {
  AddU(l, s, j, coef);
  AddU(l, s, j - 1, -coef);
}

int MilpModel::AddCol(double lb, double ub, double obj, bool integer) {
  col_lb_.push_back(lb);
  col_ub_.push_back(ub);
  col_obj_.push_back(obj);
  is_int_.push_back(integer);
  lower_exprs_.emplace_back();
  return num_cols() - 1;
}

void MilpModel::AddRow(const Lin& l, double lo, double hi) {
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

void MilpModel::AddLower(int aux, Lin expr) {
  Lin row = expr;
  for (auto& t : row.terms) t.second = -t.second;
  row.constant = -row.constant;
  row.terms.emplace_back(aux, 1.0);
  AddRow(row, 0, kInf);
  lower_exprs_[aux].push_back(std::move(expr));
}

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
  AddSplitStructure(t_lower);
  std::vector<Lin> stage = ComputeTimes();
  if (p_.cost->options().comm_model == CommModel::kRelay) {
    BuildRelay(stage);
  } else {
    BuildDirect(stage);
  }
  AddTimeRows(std::move(stage));
  AddMemoryRows();
}

void MilpModel::AddSplitStructure(double t_lower) {
  // Columns: u first, then T, then auxiliaries as they come.
  u_base_ = 0;
  for (int s = 0; s < m_; ++s) {
    for (int j = 0; j + 1 < k_; ++j) AddCol(0, 1, 0, true);
  }
  time_scale_ = t_lower > 0 ? t_lower : 1;
  t_col_ = AddCol(std::max(0.0, t_lower) / time_scale_, kInf, 1, false);
  // u[S][j] <= u[S][j+1].
  for (int s = 0; s < m_; ++s) {
    for (int j = 0; j + 2 < k_; ++j) {
      Lin l;
      AddU(l, s, j, 1);
      AddU(l, s, j + 1, -1);
      AddRow(l, -kInf, 0);
    }
  }
  // u[B][j] <= u[A][j] for every edge A -> B.
  for (const auto& [a, b] : con_.edges) {
    for (int j = 0; j + 1 < k_; ++j) {
      Lin l;
      AddU(l, b, j, 1);
      AddU(l, a, j, -1);
      AddRow(l, -kInf, 0);
    }
  }
  // No stage is empty.
  for (int j = 0; j < k_; ++j) {
    Lin l;
    for (int s = 0; s < m_; ++s) AddX(l, s, j, 1);
    AddRow(l, 1, kInf);
  }
}

std::vector<Lin> MilpModel::ComputeTimes() {
  std::vector<Lin> stage(k_);
  for (int j = 0; j < k_; ++j) {
    const double slow = p_.cost->slowdown(p_.stage_device[j]);
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
  return stage;
}

void MilpModel::AddTimeRows(std::vector<Lin> stage) {
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
}

void MilpModel::AddMemoryRows() {
  const Graph& g = p_.graph();
  const double psf = p_.cost->param_state_factor();
  std::vector<std::vector<int>> touching(g.num_param_groups());
  for (int s = 0; s < m_; ++s) {
    for (int grp : con_.param_groups[s]) touching[grp].push_back(s);
  }
  // Groups touched by one super-node are its private bytes; the others are
  // charged once per stage through y[g][j] >= x[S][j].
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

// DIRECT charges of the tensors of one (producer super-node, consumer set),
// per stage.
struct MilpModel::DirectAgg {
  explicit DirectAgg(int k) : recv(k, 0), recv_z(k * k, 0), send(k, 0), send_q(k * k, 0) {}
  std::vector<double> recv;    // [b]: coefficient of r_b
  std::vector<double> recv_z;  // [b * k + a']: threshold z
  std::vector<double> send;    // [a]: coefficient of o_a
  std::vector<double> send_q;  // [a * k + b']: threshold q
};

namespace {

// Receiver at stage rb of a byte level of db bytes (its latency once, on
// the last level): an envelope over the producer's stage, for the bytes
// part and the latency part separately (both non-increasing).
void AddReceiveCharges(const Links& links, int k, double db, bool last, std::vector<double>& recv,
                       std::vector<double>& recv_z) {
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
    recv[rb] += 2 * charge(rb - 1);
    for (int a = 0; a + 1 < rb; ++a) recv_z[rb * k + a] += 2 * (charge(a) - charge(a + 1));
  }
}

// Producer at stage a of a tensor with a single byte level of b bytes:
// h(f) for the farthest receiving stage f, h(b) = min_{b'' >= b} t(a, b'')
// non-decreasing in b, written with thresholds.
void AddSendChargesOneLevel(const Links& links, int k, double b, std::vector<double>& send,
                            std::vector<double>& send_q) {
  std::vector<double> env(k);
  for (int a = 0; a + 1 < k; ++a) {
    double run = kInf;
    for (int bb = k - 1; bb > a; --bb) {
      run = std::min(run, links.t(a, bb, b));
      env[bb] = run;
    }
    send[a] += 2 * env[a + 1];
    for (int bp = a + 1; bp + 1 < k; ++bp) send_q[a * k + bp] += 2 * (env[bp + 1] - env[bp]);
  }
}

// Producer at stage a of a byte level of db bytes when the tensor has
// several: the largest tensor over the fastest outgoing link (a lower bound).
void AddSendChargesManyLevels(const Links& links, int k, double db, bool last,
                              std::vector<double>& send) {
  for (int a = 0; a + 1 < k; ++a) {
    double min_rho = kInf, min_lat = kInf;
    for (int bb = a + 1; bb < k; ++bb) {
      min_rho = std::min(min_rho, links.rho[a * k + bb]);
      min_lat = std::min(min_lat, links.lat[a * k + bb]);
    }
    send[a] += 2 * (db * min_rho + (last ? min_lat : 0));
  }
}

}  // namespace

void MilpModel::BuildDirect(std::vector<Lin>& stage) {
  const Links links(p_);
  std::map<std::pair<int, std::vector<int>>, DirectAgg> agg;
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
      std::vector<int> key = set;
      std::sort(key.begin(), key.end());
      DirectAgg& g = agg.try_emplace({t.producer, std::move(key)}, k_).first->second;
      AddReceiveCharges(links, k_, b - next, last, g.recv, g.recv_z);
      if (!single_level) {
        AddSendChargesManyLevels(links, k_, b - next, last, g.send);
      } else if (last) {  // single level: only the full set exists
        AddSendChargesOneLevel(links, k_, b, g.send, g.send_q);
      }
    }
  }
  for (const auto& [key, g] : agg) {
    AddDirectReceive(stage, key.first, key.second, g);
    AddDirectSend(stage, key.first, key.second, g);
  }
}

void MilpModel::AddDirectReceive(std::vector<Lin>& stage, int a, const std::vector<int>& set,
                                 const DirectAgg& g) {
  const int k = k_;
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
}

int MilpModel::AddSendColumn(int a, int sa, const std::vector<int>& set, int bp) {
  const int col = AddCol(0, 1, 0, false);
  for (int b : set) {
    Lin e;  // x[A][sa] - u[B][bp]
    AddX(e, a, sa, 1);
    AddU(e, b, bp, -1);
    AddLower(col, std::move(e));
  }
  return col;
}

void MilpModel::AddDirectSend(std::vector<Lin>& stage, int a, const std::vector<int>& set,
                              const DirectAgg& g) {
  const int k = k_;
  for (int sa = 0; sa + 1 < k; ++sa) {
    if (g.send[sa] > 0) stage[sa].terms.emplace_back(AddSendColumn(a, sa, set, sa), g.send[sa]);
    for (int bp = sa + 1; bp + 1 < k; ++bp) {
      const double c = g.send_q[sa * k + bp];
      if (c > 0) stage[sa].terms.emplace_back(AddSendColumn(a, sa, set, bp), c);
    }
  }
}

}  // namespace pipeplan::milp_internal
