#include "pipeplan/core/node_corrections.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pipeplan {
namespace {

// Modelled seconds of each kind in each stage: rows[s][kind index].
struct KindMatrix {
  std::vector<std::string> kinds;
  std::vector<std::vector<double>> rows;
  std::vector<double> nodes;  // per stage: nodes that run an op (CountedNode)
};

// An op the executor runs per action (a graph input is not).
bool CountedNode(const NodeSpec& node) { return node.op != "placeholder"; }

// Solves a x = b (small, symmetric positive definite) by Gaussian
// elimination with partial pivoting.
std::vector<double> Solve(std::vector<std::vector<double>> a, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r) {
      if (std::abs(a[r][c]) > std::abs(a[p][c])) p = r;
    }
    std::swap(a[c], a[p]);
    std::swap(b[c], b[p]);
    if (std::abs(a[c][c]) < 1e-300) continue;
    for (size_t r = c + 1; r < n; ++r) {
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(n, 0.0);
  for (size_t i = n; i-- > 0;) {
    double sum = b[i];
    for (size_t k = i + 1; k < n; ++k) sum -= a[i][k] * x[k];
    x[i] = std::abs(a[i][i]) < 1e-300 ? 0 : sum / a[i][i];
  }
  return x;
}

KindMatrix Modelled(const CostModel& cost, std::span<const int> node_stage,
                    std::span<const int> stage_device, std::span<const double> units,
                    bool backward) {
  KindMatrix m;
  std::map<std::string, int> index;
  const Graph& g = cost.graph();
  for (int v = 0; v < g.num_nodes(); ++v) {
    if (index.emplace(g.node(v).op, static_cast<int>(m.kinds.size())).second) {
      m.kinds.push_back(g.node(v).op);
    }
  }
  m.rows.assign(stage_device.size(), std::vector<double>(m.kinds.size(), 0.0));
  m.nodes.assign(stage_device.size(), 0.0);
  for (int v = 0; v < g.num_nodes(); ++v) {
    const int s = node_stage[v];
    if (CountedNode(g.node(v))) m.nodes[s] += 1;
    const double ref = backward ? cost.backward_ref(v) : cost.forward_ref(v);
    const double unit = s < static_cast<int>(units.size()) && units[s] > 0 ? units[s] : 1;
    m.rows[s][index[g.node(v).op]] += ref * cost.slowdown(stage_device[s]) / unit;
  }
  return m;
}

// Adds one stage's equation (row . x = measured, weighted by 1 / measured:
// relative errors) to the normal equations a x = b.
void AddEquation(const std::vector<double>& row, double measured,
                 std::vector<std::vector<double>>& a, std::vector<double>& b) {
  for (size_t i = 0; i < row.size(); ++i) {
    const double ri = row[i] / measured;
    b[i] += ri;
    for (size_t j = 0; j < row.size(); ++j) a[i][j] += ri * row[j] / measured;
  }
}

// measured = fixed + per_node x nodes + scale x the stage's total modelled
// seconds, least squares on relative errors: the scale the kinds are
// pulled towards. Without a positive per-node cost, fixed + scale alone;
// scale 0 when there is too little to tell.
// Whether the measured stages run different numbers of nodes: only then is
// a cost per node told from the fixed one.
bool NodesVary(const KindMatrix& m, const std::vector<double>& measured) {
  double fewest = INFINITY, most = 0;
  for (size_t s = 0; s < m.rows.size(); ++s) {
    if (measured[s] > 0) fewest = std::min(fewest, m.nodes[s]), most = std::max(most, m.nodes[s]);
  }
  return most > fewest;
}

struct CommonFit {
  double fixed = 0, per_node = 0, scale = 0;
};
CommonFit FitCommon(const KindMatrix& m, const std::vector<double>& measured, bool per_node) {
  const size_t cols = per_node ? 3 : 2;
  std::vector<std::vector<double>> a(cols, std::vector<double>(cols, 0.0));
  std::vector<double> b(cols, 0.0);
  for (size_t s = 0; s < m.rows.size(); ++s) {
    if (!(measured[s] > 0)) continue;
    double total = 0;
    for (double x : m.rows[s]) total += x;
    std::vector<double> row = {1.0, total};
    if (per_node) row.push_back(m.nodes[s]);
    AddEquation(row, measured[s], a, b);
  }
  for (size_t j = 0; j < cols; ++j) a[j][j] += 1e-12;
  const std::vector<double> x = Solve(std::move(a), std::move(b));
  if (per_node && (x[0] < 0 || !(x[1] > 0) || x[2] < 0)) return FitCommon(m, measured, false);
  if (x[0] < 0 || !(x[1] > 0)) return {};
  return {.fixed = x[0], .per_node = per_node ? x[2] : 0, .scale = x[1]};
}

// Per kind: min sum_s ((row_s . k [+ fixed + per_node x nodes] - m_s) / m_s)^2 +
// ridge sum_j w_j (k_j - c)^2, w_j the kind's share of the modelled time
// (with a fixed part: 1 / c^2, a relative departure), c the common factor
// (total measured / total modelled; with a fixed part, the scale of
// FitCommon). The fixed and per-node parts are barely regularised.
std::map<std::string, double> FitKinds(const KindMatrix& m, const std::vector<double>& measured,
                                       const KindFitOptions& options, double* common, double* fixed,
                                       double* per_node) {
  const size_t n = m.kinds.size();
  double total_measured = 0, total_modelled = 0;
  std::vector<double> share(n, 0.0);
  for (size_t s = 0; s < m.rows.size(); ++s) {
    if (!(measured[s] > 0)) continue;
    total_measured += measured[s];
    for (size_t j = 0; j < n; ++j) {
      total_modelled += m.rows[s][j];
      share[j] += m.rows[s][j];
    }
  }
  *common = total_modelled > 0 ? total_measured / total_modelled : 1;
  const bool nodes_vary = NodesVary(m, measured);
  CommonFit prior;
  if (options.fit_fixed) {
    prior = FitCommon(m, measured, nodes_vary);
    if (prior.scale > 0) *common = prior.scale;
  }
  const size_t cols = n + (options.fit_fixed ? 2 : 0);
  std::vector<std::vector<double>> a(cols, std::vector<double>(cols, 0.0));
  std::vector<double> b(cols, 0.0);
  for (size_t s = 0; s < m.rows.size(); ++s) {
    if (!(measured[s] > 0)) continue;
    std::vector<double> row = m.rows[s];
    if (options.fit_fixed) row.insert(row.end(), {1.0, nodes_vary ? m.nodes[s] : 0.0});
    AddEquation(row, measured[s], a, b);
  }
  for (size_t j = 0; j < n; ++j) {
    // Without a fixed part: weighted by the kind's share of the modelled
    // time. With one (few stages, many kinds): every kind pays the same for
    // its relative departure from the scale, so a kind seen in one stage
    // only cannot take that stage's whole error (a 20x factor on gelu).
    const double w =
        options.fit_fixed
            ? options.ridge / std::max(1e-300, *common * *common)
            : options.ridge * (total_modelled > 0 ? share[j] / total_modelled : 0) + 1e-9;
    a[j][j] += w;
    b[j] += w * *common;
  }
  if (options.fit_fixed) {
    a[n][n] += 1e-9, b[n] += 1e-9 * prior.fixed;
    a[n + 1][n + 1] += 1e-9, b[n + 1] += 1e-9 * prior.per_node;
  }
  const std::vector<double> k = Solve(std::move(a), std::move(b));
  *fixed = options.fit_fixed ? std::max(0.0, k[n]) : 0;
  *per_node = options.fit_fixed ? std::max(0.0, k[n + 1]) : 0;
  std::map<std::string, double> out;
  for (size_t j = 0; j < n; ++j) {
    if (share[j] > 0) out[m.kinds[j]] = std::clamp(k[j], *common / 20, *common * 20);
  }
  return out;
}

// Optimizer seconds = fixed + rate x param bytes, least squares over stages.
void FitOptimizer(const CostModel& cost, std::span<const int> node_stage,
                  std::span<const MeasuredStage> measured, KindCorrections& out) {
  std::vector<double> bytes(measured.size(), 0.0);
  for (int v = 0; v < cost.graph().num_nodes(); ++v) {
    bytes[node_stage[v]] += cost.graph().node(v).param_bytes;
  }
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t s = 0; s < measured.size(); ++s) {
    if (measured[s].optimizer_seconds < 0) continue;
    n += 1, sx += bytes[s], sy += measured[s].optimizer_seconds;
    sxx += bytes[s] * bytes[s], sxy += bytes[s] * measured[s].optimizer_seconds;
  }
  if (n == 0) return;
  const double det = n * sxx - sx * sx;
  if (det > 1e-12 * n * sxx && det > 0) {
    out.optimizer_seconds_per_param_byte = std::max(0.0, (n * sxy - sx * sy) / det);
    out.optimizer_fixed_seconds =
        std::max(0.0, (sy - out.optimizer_seconds_per_param_byte * sx) / n);
  } else {
    out.optimizer_fixed_seconds = sy / n;
  }
}

}  // namespace

double KindCorrections::ForwardFactor(const std::string& op) const {
  auto it = forward.find(op);
  return it == forward.end() ? forward_common : it->second;
}

double KindCorrections::BackwardFactor(const std::string& op) const {
  auto it = backward.find(op);
  return it == backward.end() ? backward_common : it->second;
}

absl::StatusOr<KindCorrections> FitKindCorrections(const CostModel& cost,
                                                   std::span<const int> node_stage,
                                                   std::span<const int> stage_device,
                                                   std::span<const MeasuredStage> measured,
                                                   const KindFitOptions& options,
                                                   std::span<const double> stage_units) {
  if (static_cast<int>(node_stage.size()) != cost.graph().num_nodes() ||
      measured.size() != stage_device.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kind fit: ", node_stage.size(), " node stages for ", cost.graph().num_nodes(),
                     " nodes, ", measured.size(), " measured stages for ", stage_device.size()));
  }
  for (int s : node_stage) {
    if (s < 0 || s >= static_cast<int>(stage_device.size())) {
      return absl::InvalidArgumentError(absl::StrCat("kind fit: node on stage ", s));
    }
  }
  std::vector<double> fwd, bwd;
  for (const MeasuredStage& m : measured) {
    fwd.push_back(m.forward_seconds);
    bwd.push_back(m.backward_seconds);
  }
  if (std::none_of(fwd.begin(), fwd.end(), [](double x) { return x > 0; })) {
    return absl::InvalidArgumentError("kind fit: no stage has a measured forward");
  }
  KindCorrections out;
  out.forward =
      FitKinds(Modelled(cost, node_stage, stage_device, stage_units, false), fwd, options,
               &out.forward_common, &out.forward_fixed_seconds, &out.forward_per_node_seconds);
  out.backward =
      FitKinds(Modelled(cost, node_stage, stage_device, stage_units, true), bwd, options,
               &out.backward_common, &out.backward_fixed_seconds, &out.backward_per_node_seconds);
  FitOptimizer(cost, node_stage, measured, out);
  return out;
}

std::vector<MeasuredStage> PredictStageTimes(const CostModel& cost,
                                             const KindCorrections& corrections,
                                             std::span<const int> node_stage,
                                             std::span<const int> stage_device,
                                             std::span<const double> stage_units) {
  std::vector<MeasuredStage> out(
      stage_device.size(), {corrections.forward_fixed_seconds, corrections.backward_fixed_seconds,
                            corrections.optimizer_fixed_seconds});
  const Graph& g = cost.graph();
  for (int v = 0; v < g.num_nodes(); ++v) {
    const int s = node_stage[v];
    const double unit =
        s < static_cast<int>(stage_units.size()) && stage_units[s] > 0 ? stage_units[s] : 1;
    const double slow = cost.slowdown(stage_device[s]) / unit;
    if (CountedNode(g.node(v))) {
      out[s].forward_seconds += corrections.forward_per_node_seconds;
      out[s].backward_seconds += corrections.backward_per_node_seconds;
    }
    out[s].forward_seconds += cost.forward_ref(v) * slow * corrections.ForwardFactor(g.node(v).op);
    out[s].backward_seconds +=
        cost.backward_ref(v) * slow * corrections.BackwardFactor(g.node(v).op);
    out[s].optimizer_seconds +=
        corrections.optimizer_seconds_per_param_byte * g.node(v).param_bytes;
  }
  return out;
}

}  // namespace pipeplan
