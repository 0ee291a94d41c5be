#include "pipeplan/core/node_corrections.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pipeplan {
namespace {

// Modelled seconds of each kind in each stage: rows[s][kind index].
struct KindMatrix {
  std::vector<std::string> kinds;
  std::vector<std::vector<double>> rows;
  std::vector<double> nodes;   // per stage: nodes that run an op (CountedNode)
  std::vector<double> bytes;   // per stage: parameter bytes, in the rows' device units
  std::vector<double> totals;  // per stage: the sum of its row
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
  m.totals.assign(stage_device.size(), 0.0);
  m.bytes.assign(stage_device.size(), 0.0);
  for (int v = 0; v < g.num_nodes(); ++v) {
    const int s = node_stage[v];
    if (CountedNode(g.node(v))) m.nodes[s] += 1;
    const double ref = backward ? cost.backward_ref(v) : cost.forward_ref(v);
    const double unit = s < static_cast<int>(units.size()) && units[s] > 0 ? units[s] : 1;
    const double slow = cost.slowdown(stage_device[s]) / unit;
    m.rows[s][index[g.node(v).op]] += ref * slow;
    m.totals[s] += ref * slow;
    m.bytes[s] += g.node(v).param_bytes * slow;
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

// The costs a stage may pay besides its kinds' modelled seconds (fit_fixed):
// a fixed cost per action, one per node it runs, one per parameter byte it
// holds (a layer whose weights outweigh its flops: a late convolution on a
// small image reads megabytes of weights for little arithmetic).
enum Extra { kFixed = 0, kPerNode = 1, kPerByte = 2 };
constexpr int kExtras = 3;
using ExtraSet = std::array<bool, kExtras>;
// An extra cost is fitted only where it predicts the left-out stages 5% better.
constexpr double kBetterBy = 0.95;
// No stage left out of a fit.
constexpr size_t kKeepAll = static_cast<size_t>(-1);

double ExtraColumn(const KindMatrix& m, size_t s, int e) {
  return e == kFixed ? 1.0 : e == kPerNode ? m.nodes[s] : m.bytes[s];
}

// One stage's row: the kinds' modelled seconds, then the extras (0 where
// not used).
std::vector<double> FullRow(const KindMatrix& m, size_t s, const ExtraSet& used) {
  std::vector<double> row = m.rows[s];
  for (int e = 0; e < kExtras; ++e) row.push_back(used[e] ? ExtraColumn(m, s, e) : 0.0);
  return row;
}

struct CommonFit {
  double scale = 0;  // 0: too little to tell
  std::array<double, kExtras> extra = {};
};

// measured = scale x the stage's total modelled seconds + the used extras,
// least squares on relative errors over the measured stages but `skip`: the
// scale the kinds are pulled towards. Scale 0 when a part comes out
// negative or the scale not positive.
CommonFit FitCommon(const KindMatrix& m, const std::vector<double>& measured, const ExtraSet& used,
                    size_t skip) {
  std::vector<int> extras;
  for (int e = 0; e < kExtras; ++e) {
    if (used[e]) extras.push_back(e);
  }
  const size_t cols = 1 + extras.size();
  std::vector<std::vector<double>> a(cols, std::vector<double>(cols, 0.0));
  std::vector<double> b(cols, 0.0);
  for (size_t s = 0; s < m.rows.size(); ++s) {
    if (s == skip || !(measured[s] > 0)) continue;
    std::vector<double> row = {m.totals[s]};
    for (int e : extras) row.push_back(ExtraColumn(m, s, e));
    AddEquation(row, measured[s], a, b);
  }
  for (size_t j = 0; j < cols; ++j) a[j][j] += 1e-12;
  const std::vector<double> x = Solve(std::move(a), std::move(b));
  if (!(x[0] > 0) || std::any_of(x.begin(), x.end(), [](double v) { return v < 0; })) return {};
  CommonFit out{.scale = x[0]};
  for (size_t j = 0; j < extras.size(); ++j) out.extra[extras[j]] = x[j + 1];
  return out;
}

// One direction's (F or B) fit.
struct KindFit {
  std::map<std::string, double> factors;
  double common = 1;
  std::array<double, kExtras> extra = {};  // fixed, per node, per param byte

  double Predict(const KindMatrix& m, size_t s) const {
    double sum = 0;
    for (size_t j = 0; j < m.kinds.size(); ++j) {
      if (m.rows[s][j] == 0) continue;
      auto it = factors.find(m.kinds[j]);
      sum += m.rows[s][j] * (it == factors.end() ? common : it->second);
    }
    for (int e = 0; e < kExtras; ++e) sum += extra[e] * ExtraColumn(m, s, e);
    return sum;
  }
};

// The ridge of FitKinds, added to its normal equations: each kind pulled
// towards the common factor. Without extras weighted by the kind's share of
// the modelled time; with them (few stages, many kinds) every kind pays the
// same for its relative departure from the scale, so a kind seen in one
// stage only cannot take that stage's whole error (a 20x factor on gelu).
void AddRidge(const std::vector<double>& share, double total_modelled, double common,
              const KindFitOptions& options, std::vector<std::vector<double>>& a,
              std::vector<double>& b) {
  for (size_t j = 0; j < share.size(); ++j) {
    const double w =
        options.fit_fixed
            ? options.ridge / std::max(1e-300, common * common)
            : options.ridge * (total_modelled > 0 ? share[j] / total_modelled : 0) + 1e-9;
    a[j][j] += w;
    b[j] += w * common;
  }
}

// Per kind: min sum_s ((row_s . k [+ the used extras] - m_s) / m_s)^2 +
// the ridge towards c, the common factor (total measured / total modelled;
// with extras, the scale of FitCommon), over the measured stages but
// `skip`. The extras are barely regularised.
KindFit FitKindsWith(const KindMatrix& m, const std::vector<double>& measured,
                     const KindFitOptions& options, const ExtraSet& used, size_t skip) {
  const size_t n = m.kinds.size();
  double total_measured = 0, total_modelled = 0;
  std::vector<double> share(n, 0.0);
  for (size_t s = 0; s < m.rows.size(); ++s) {
    if (s == skip || !(measured[s] > 0)) continue;
    total_measured += measured[s];
    for (size_t j = 0; j < n; ++j) total_modelled += m.rows[s][j], share[j] += m.rows[s][j];
  }
  KindFit fit;
  fit.common = total_modelled > 0 ? total_measured / total_modelled : 1;
  // Without the kinds the extras may not fit (a kind at 6x its flops);
  // then they start from nothing and the scale from the ratio.
  const CommonFit prior = options.fit_fixed ? FitCommon(m, measured, used, skip) : CommonFit{};
  if (prior.scale > 0) fit.common = prior.scale;
  std::vector<std::vector<double>> a(n + kExtras, std::vector<double>(n + kExtras, 0.0));
  std::vector<double> b(n + kExtras, 0.0);
  for (size_t s = 0; s < m.rows.size(); ++s) {
    if (s != skip && measured[s] > 0) AddEquation(FullRow(m, s, used), measured[s], a, b);
  }
  AddRidge(share, total_modelled, fit.common, options, a, b);
  for (int e = 0; e < kExtras; ++e) a[n + e][n + e] += 1e-9, b[n + e] += 1e-9 * prior.extra[e];
  const std::vector<double> k = Solve(std::move(a), std::move(b));
  for (int e = 0; e < kExtras; ++e) fit.extra[e] = used[e] ? std::max(0.0, k[n + e]) : 0;
  for (size_t j = 0; j < n; ++j) {
    if (share[j] > 0) fit.factors[m.kinds[j]] = std::clamp(k[j], fit.common / 20, fit.common * 20);
  }
  return fit;
}

// Whether the stages tell extra `e` from the scale: its column per modelled
// second spreads by more than 1.2x over the measured stages (stages modelled
// alike cannot tell a fixed cost from the scale; nodes or bytes in
// proportion to the flops, a cost per node or byte).
bool ToldFromScale(const KindMatrix& m, const std::vector<double>& measured, int e) {
  double lo = INFINITY, hi = 0;
  for (size_t s = 0; s < m.rows.size(); ++s) {
    if (!(measured[s] > 0) || !(m.totals[s] > 0)) continue;
    const double per_second = ExtraColumn(m, s, e) / m.totals[s];
    lo = std::min(lo, per_second), hi = std::max(hi, per_second);
  }
  return hi > 1.2 * lo;
}

// Root mean square relative error of each measured stage predicted by the
// fit on the others; infinite when a fold has fewer stages than free
// columns.
double LeaveOneOutError(const KindMatrix& m, const std::vector<double>& measured,
                        const KindFitOptions& options, const ExtraSet& used) {
  const size_t points =
      std::count_if(measured.begin(), measured.end(), [](double v) { return v > 0; });
  if (points < 2 + static_cast<size_t>(std::count(used.begin(), used.end(), true))) {
    return INFINITY;
  }
  double sum = 0;
  for (size_t s = 0; s < m.rows.size(); ++s) {
    if (!(measured[s] > 0)) continue;
    sum += std::pow(FitKindsWith(m, measured, options, used, s).Predict(m, s) / measured[s] - 1, 2);
  }
  return std::sqrt(sum / points);
}

// With fit_fixed, which extras: the set whose fit predicts each measured
// stage best from the others (leave-one-out), among those the stages tell
// from the scale. More extras must do better by kBetterBy: a cost that only
// explains one stage's noise stays out.
KindFit FitKinds(const KindMatrix& m, const std::vector<double>& measured,
                 const KindFitOptions& options, const ExtraSet& allowed) {
  ExtraSet best = {};
  if (options.fit_fixed) {
    double best_error = INFINITY;
    for (int count = 0; count <= kExtras; ++count) {
      for (unsigned mask = 0; mask < (1u << kExtras); ++mask) {
        if (std::popcount(mask) != count) continue;
        ExtraSet used;
        bool told = true;
        for (int e = 0; e < kExtras; ++e) {
          used[e] = (mask >> e) & 1;
          if (used[e]) told = told && allowed[e] && ToldFromScale(m, measured, e);
        }
        if (!told) continue;
        const double error = LeaveOneOutError(m, measured, options, used);
        if (error < best_error * kBetterBy) best_error = error, best = used;
      }
    }
  }
  return FitKindsWith(m, measured, options, best, kKeepAll);
}

// The extras a fit may use: none on a graph with measured node times (the
// exporter's --profile times every op it calls). Each node's dispatch and
// its weights' cost are in its own time, and four stages cannot hold a free
// cost apart from the scale: leave-one-out over plan A's stages picked, run
// after run, a different one (0.13-0.65 ms per node, or 18-24 ms per F on
// 16 ms of profiled forward), and the plans priced from it were 26-38% off.
ExtraSet AllowedExtras(const Graph& g) {
  for (int v = 0; v < g.num_nodes(); ++v) {
    if (g.node(v).forward_seconds && g.node(v).backward_seconds) return {false, false, false};
  }
  return {true, true, true};
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
  const ExtraSet allowed = AllowedExtras(cost.graph());
  const KindFit f =
      FitKinds(Modelled(cost, node_stage, stage_device, stage_units, false), fwd, options, allowed);
  const KindFit b =
      FitKinds(Modelled(cost, node_stage, stage_device, stage_units, true), bwd, options, allowed);
  out.forward = f.factors, out.backward = b.factors;
  out.forward_common = f.common, out.backward_common = b.common;
  out.forward_fixed_seconds = f.extra[kFixed], out.backward_fixed_seconds = b.extra[kFixed];
  out.forward_per_node_seconds = f.extra[kPerNode],
  out.backward_per_node_seconds = b.extra[kPerNode];
  out.forward_seconds_per_param_byte = f.extra[kPerByte];
  out.backward_seconds_per_param_byte = b.extra[kPerByte];
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
    const double bytes = g.node(v).param_bytes * slow;
    out[s].forward_seconds += cost.forward_ref(v) * slow * corrections.ForwardFactor(g.node(v).op) +
                              corrections.forward_seconds_per_param_byte * bytes;
    out[s].backward_seconds +=
        cost.backward_ref(v) * slow * corrections.BackwardFactor(g.node(v).op) +
        corrections.backward_seconds_per_param_byte * bytes;
    out[s].optimizer_seconds +=
        corrections.optimizer_seconds_per_param_byte * g.node(v).param_bytes;
  }
  return out;
}

}  // namespace pipeplan
