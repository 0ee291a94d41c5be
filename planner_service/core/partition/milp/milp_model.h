// The mixed-integer program of the contiguous pipeline split over the
// super-nodes of a contraction (contraction.h): prefix variables
// u[S][j] = [stage(S) <= j], precedence, non-empty stages, exact memory rows,
// per-tensor communication indicators, minimise the bottleneck T. Its cost is
// never above CostModel::Evaluate's, so its bound is valid for the contracted
// problem. The formulation: docs/partitioning.md, "MILP formulation".
// Internal to pipeplan_core.
#ifndef PIPEPLAN_CORE_PARTITION_MILP_MODEL_H_
#define PIPEPLAN_CORE_PARTITION_MILP_MODEL_H_

#include <limits>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "partition/contraction.h"
#include "pipeplan/core/partition.h"

class OsiClpSolverInterface;

namespace pipeplan::milp_internal {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// A linear expression: sum of coefficient x column, plus a constant.
struct Lin {
  std::vector<std::pair<int, double>> terms;
  double constant = 0;
};

// Link cost components between the devices of two stages (0 on one device).
struct Links {
  explicit Links(const PartitionProblem& p);
  double t(int a, int b, double bytes) const { return bytes * rho[a * k + b] + lat[a * k + b]; }
  int k;
  std::vector<double> rho, lat;
};

class MilpModel {
 public:
  // `need`: optional per-stage lower bounds on communication that every split
  // at least as good as the incumbent meets (CommLowerBound). REQUIRES:
  // `problem`, `con` and `need` outlive this object.
  MilpModel(const PartitionProblem& problem, const Contraction& con, double t_lower,
            std::span<const double> need);

  int num_cols() const { return static_cast<int>(col_lb_.size()); }
  int num_rows() const { return static_cast<int>(row_lo_.size()); }
  int t_col() const { return t_col_; }
  // Times are modelled in units of time_scale() (about the optimum).
  double time_scale() const { return time_scale_; }
  // A row with no variables was violated: the model is infeasible as built.
  bool infeasible_constant() const { return infeasible_constant_; }

  void Load(OsiClpSolverInterface& solver) const;

  // Full primal vector for a stage of every super-node (aux variables at
  // their smallest feasible values) and its MILP objective.
  std::vector<double> Primal(std::span<const int> stage_of_super, double* objective) const;

  std::vector<int> StagesFromPrimal(const double* x) const;

 private:
  // Tensors grouped by (producer super-node, consumer set).
  struct Tensor {
    int producer;
    std::vector<std::pair<int, double>> consumers;  // (super-node, bytes), bytes desc
  };

  int UCol(int s, int j) const { return u_base_ + s * (k_ - 1) + j; }
  // coef * u[s][j] with the fixed ends.
  void AddU(Lin& l, int s, int j, double coef) const;
  // coef * x[s][j] = coef * (u[s][j] - u[s][j-1]).
  void AddX(Lin& l, int s, int j, double coef) const;
  int AddCol(double lb, double ub, double obj, bool integer);
  // lo <= sum terms + constant <= hi, duplicates merged.
  void AddRow(const Lin& l, double lo, double hi);
  // aux >= expr (recorded for warm starts).
  void AddLower(int aux, Lin expr);

  struct DirectAgg;  // DIRECT charges of one (producer, consumer set)

  void Build(double t_lower);
  // Prefix columns, T, precedence and non-empty stages.
  void AddSplitStructure(double t_lower);
  // Per stage its compute as a function of u (and the rows with need_).
  std::vector<Lin> ComputeTimes();
  // T >= each stage's time, scaled by time_scale_.
  void AddTimeRows(std::vector<Lin> stage);
  // Exact memory rows for the stages whose device everything might not fit.
  void AddMemoryRows();
  // Communication charges added to the stage times.
  void BuildRelay(std::vector<Lin>& stage);
  void BuildDirect(std::vector<Lin>& stage);
  void AddDirectReceive(std::vector<Lin>& stage, int a, const std::vector<int>& set,
                        const DirectAgg& g);
  // A new [0, 1] column c with c >= x[a][sa] - u[b][bp] for each b in
  // `set`: one term of AddDirectSend's linearization.
  int AddSendColumn(int a, int sa, const std::vector<int>& set, int bp);
  void AddDirectSend(std::vector<Lin>& stage, int a, const std::vector<int>& set,
                     const DirectAgg& g);
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
  bool infeasible_constant_ = false;
};

}  // namespace pipeplan::milp_internal

#endif  // PIPEPLAN_CORE_PARTITION_MILP_MODEL_H_
