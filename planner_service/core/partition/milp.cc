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
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cbc_solve.h"
#include "comm_bound.h"
#include "contraction.h"
#include "milp_model.h"
#include "pipeplan/core/partition.h"
#include "pipeplan/core/status_macros.h"

namespace pipeplan {
namespace milp_internal {
namespace {

// Above this many prefix variables (super-nodes x (stages - 1)) the presolve
// contracts lossily, and the exact bound model is not attempted.
constexpr int kTargetPrefixVars = 2400;
constexpr int kMaxExactPrefixVars = 12000;

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
}  // namespace milp_internal

std::unique_ptr<Partitioner> MakeMilpPartitioner() {
  return std::make_unique<milp_internal::MilpPartitioner>();
}

}  // namespace pipeplan
