#include "cbc_solve.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
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
#include "OsiClpSolverInterface.hpp"
#include "absl/strings/str_format.h"

namespace pipeplan::milp_internal {
namespace {

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

// Cut generators and heuristics for one run; CBC keeps pointers to them,
// so they live as long as the run.
class CbcPlugins {
 public:
  CbcPlugins() {
    probing_.setUsingObjective(1);
    probing_.setMaxPass(1);
    probing_.setMaxProbe(100);
    probing_.setMaxLook(50);
    probing_.setRowCuts(3);
    gomory_.setLimit(300);
    clique_.setStarCliqueReport(false);
    clique_.setRowCliqueReport(false);
  }

  // `limited`: the run has a deadline.
  void Attach(CbcModel& cbc, bool limited) {
    cbc.addCutGenerator(&probing_, -1, "Probing");
    cbc.addCutGenerator(&gomory_, -1, "Gomory");
    cbc.addCutGenerator(&knapsack_, -1, "Knapsack");
    cbc.addCutGenerator(&clique_, -1, "Clique");
    cbc.addCutGenerator(&mir_, -1, "MIR2");
    cbc.addCutGenerator(&flow_, -1, "FlowCover");
    cbc.addHeuristic(&rounding_.emplace(cbc));
    // FPump, local search and RINS run sub-solves that do not look at the
    // deadline; use them only when there is no deadline.
    pump_.emplace(cbc);
    if (!limited) cbc.addHeuristic(&*pump_);
    local_.emplace(cbc);
    if (!limited) cbc.addHeuristic(&*local_);
    rins_.emplace(cbc);
    if (!limited) cbc.addHeuristic(&*rins_);
  }

 private:
  CglProbing probing_;
  CglGomory gomory_;
  CglKnapsackCover knapsack_;
  CglClique clique_;
  CglMixedIntegerRounding2 mir_;
  CglFlowCover flow_;
  std::optional<CbcRounding> rounding_;
  std::optional<CbcHeuristicFPump> pump_;
  std::optional<CbcHeuristicLocal> local_;
  std::optional<CbcHeuristicRINS> rins_;
};

// Quiet (CBC's own log would go to stdout; the phases that matter are
// traced through the caller's log instead), wall-clock limits, and
// tolerances far below real differences of the scaled times.
void Configure(CbcModel& cbc, const PartitionProblem& problem) {
  cbc.setLogLevel(0);
  cbc.messageHandler()->setLogLevel(0);
  cbc.solver()->messageHandler()->setLogLevel(0);
  cbc.setUseElapsedTime(true);
  cbc.setAllowableFractionGap(std::max(problem.relative_gap, 1e-9));
  cbc.setAllowableGap(1e-12);
  cbc.setCutoffIncrement(1e-10);
}

// CBC checks its limit between root cut passes and nodes: with little time,
// few passes and little strong branching.
void LimitSearch(CbcModel& cbc, absl::Time stop_at) {
  const double left = absl::ToDoubleSeconds(stop_at - absl::Now());
  cbc.setMaximumSeconds(std::max(0.001, left));
  cbc.setMaximumCutPassesAtRoot(left < 1 ? 2 : left < 10 ? 5 : 10);
  if (left < 2) {
    cbc.setNumberStrong(left < 0.5 ? 0 : 2);
    cbc.setNumberBeforeTrust(left < 0.5 ? 0 : 2);
  }
}

// Why branch and bound ended, for the note.
std::string StopReason(const CbcOutcome& out, const CbcModel& cbc, const StopCheck& check,
                       const PartitionProblem& problem) {
  if (out.proven_optimal) return "optimal";
  if (out.proven_infeasible) return "infeasible";
  if (problem.cancelled != nullptr && problem.cancelled->load()) return "cancelled";
  if (check.Expired() || cbc.maximumSecondsReached()) return "deadline";
  return "stopped";
}

// The outcome of a finished branch and bound: proofs, bound, and the stage
// of every super-node for each incumbent seen.
void Collect(CbcModel& cbc, const MilpModel& model, const StopCheck& check, double lp_bound,
             std::vector<std::vector<double>>& solutions, CbcOutcome& out) {
  out.nodes = cbc.getNodeCount();
  const bool trusted = !check.lp_interrupted && !cbc.isAbandoned();
  out.proven_infeasible = trusted && cbc.isProvenInfeasible() && cbc.bestSolution() == nullptr;
  out.proven_optimal = trusted && cbc.isProvenOptimal() && cbc.bestSolution() != nullptr;
  if (cbc.bestSolution() != nullptr) {
    solutions.emplace_back(cbc.bestSolution(), cbc.bestSolution() + model.num_cols());
  }
  out.stop = StopReason(out, cbc, check, *check.problem);
  if (!out.proven_infeasible) {
    double bound = lp_bound;
    if (out.proven_optimal || (trusted && cbc.getNodeCount() > 0 && std::isfinite(lp_bound))) {
      bound = std::max(bound, cbc.getBestPossibleObjValue());
    }
    out.bound = std::isfinite(bound) ? bound * model.time_scale() : -kInf;
  }
  for (const auto& s : solutions) {
    if (static_cast<int>(s.size()) == model.num_cols()) {
      out.candidates.push_back(model.StagesFromPrimal(s.data()));
    }
  }
}

}  // namespace

// Phase timings through the caller's log (PartitionProblem::log), if any.
void Trace(const PartitionProblem& problem, const char* what, absl::Time since) {
  if (problem.log) {
    problem.log(
        absl::StrFormat("[milp] %-28s %8.3fs", what, absl::ToDoubleSeconds(absl::Now() - since)));
  }
}

namespace {

// Solves the root LP first: its value is a valid bound even when the search
// is stopped early (CBC's own best-possible value is not reliable when the
// limit interrupts the root). False when that proves the model infeasible
// (without a warm start to fall back on): `out` is then final.
bool SolveRoot(CbcModel& cbc, const StopCheck& check, bool warm, double& lp_bound,
               CbcOutcome& out) {
  const absl::Time t1 = absl::Now();
  cbc.initialSolve();
  Trace(*check.problem, "root lp", t1);
  if (check.lp_interrupted) {
    out.stop = "stopped in the root LP";
  } else if (cbc.solver()->isProvenOptimal()) {
    lp_bound = cbc.solver()->getObjValue();
  } else if (cbc.solver()->isProvenPrimalInfeasible() && !warm) {
    out.proven_infeasible = true;
    out.stop = "infeasible";
    return false;
  }
  return true;
}

}  // namespace

CbcOutcome RunCbc(const PartitionProblem& problem, const MilpModel& model,
                  const std::vector<int>* warm_super, absl::Time stop_at) {
  CbcOutcome out;
  if (model.infeasible_constant()) {
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
  Configure(cbc, problem);
  Trace(problem, "load", t0);
  CbcPlugins plugins;
  plugins.Attach(cbc, limited);
  std::vector<std::vector<double>> solutions;
  StopHandler handler(&check, &solutions);
  cbc.passInEventHandler(&handler);

  double lp_bound = -kInf;
  if (!SolveRoot(cbc, check, /*warm=*/warm_super != nullptr, lp_bound, out)) return out;
  if (warm_super != nullptr) {
    double objective = 0;
    std::vector<double> x = model.Primal(*warm_super, &objective);
    // Not checked by CBC (that re-solves the LP): Primal() is feasible by
    // construction, which the brute-force tests exercise.
    cbc.setBestSolution(x.data(), static_cast<int>(x.size()), objective, /*check=*/false);
  }
  if (check.Expired()) {
    if (out.stop.empty()) out.stop = "stopped after the root LP";
    out.bound = std::isfinite(lp_bound) ? lp_bound * model.time_scale() : -kInf;
    return out;
  }
  if (limited) LimitSearch(cbc, stop_at);
  const absl::Time t2 = absl::Now();
  cbc.branchAndBound();
  Trace(problem, "branch and bound", t2);
  Collect(cbc, model, check, lp_bound, solutions, out);
  Trace(problem, "cbc total", t0);
  return out;
}

}  // namespace pipeplan::milp_internal
