#include "cbc_solve.h"

#include <algorithm>
#include <cmath>
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

}  // namespace

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

}  // namespace pipeplan::milp_internal
