// The bottleneck DP over the ideal lattice for separable stage charges: a
// stage between ideals I ⊊ J costs a term of I plus a term of J. That is the
// RELAY cost model exactly, and the separable lower bound on DIRECT. A binary
// search on the bottleneck T runs one linear feasibility pass per T; every
// chain it finds is evaluated exactly. The derivation:
// docs/partitioning.md, "Ideal-lattice DP". Internal to pipeplan_core.
#ifndef PIPEPLAN_CORE_PARTITION_SEPARABLE_DP_H_
#define PIPEPLAN_CORE_PARTITION_SEPARABLE_DP_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ideal_lattice.h"
#include "pipeplan/core/partition.h"

namespace pipeplan::lattice_dp_internal {

// The stage charge the DP uses: RELAY (exact under RELAY, an upper bound on
// DIRECT with uniform links) or the separable lower bound on DIRECT.
enum class Charge { kRelay, kDirectLower };

class SeparableDp {
 public:
  // REQUIRES: `p` and `lat` outlive this object.
  SeparableDp(const PartitionProblem& p, const Lattice& lat);

  void SetCharge(Charge charge);

  // Lets a stage be empty at charge 0 (bound searches only).
  void set_allow_empty(bool allow) { allow_empty_ = allow; }
  bool allow_empty() const { return allow_empty_; }

  // Whether a chain of ideals with every stage charge <= T exists (and, with
  // `memory`, every stage within the upper-bound memory).
  bool Feasible(double T, bool memory);

  // The chain I_0..I_k of the last successful Feasible call.
  std::vector<int> Chain() const;

  // The largest stage charge of a chain.
  double ChainCharge(const std::vector<int>& chain) const;

  int64_t explored() const { return explored_; }

 private:
  // Separable charges of one stage j: h(I) = W(I)·slow - (lb·LB(I) + lc·LC(I)),
  // g(J) = W(J)·slow + rb·RB(J) + rc·RC(J), memory m(I) = psf·P(I) + inflight·A(I).
  struct StageCoef {
    double slow = 1;
    double lb = 0, lc = 0, rb = 0, rc = 0;
    double psf = 0, inflight = 0, cap = kInf;
  };

  struct Terms;  // stage j's charge terms of an ideal

  template <bool kMem>
  bool Feasible(double T);
  // Computes S_{j+1} into nxt_; false when it is empty.
  template <bool kMem>
  bool AdvanceStage(Terms t, double T, int* parent);
  // Whether V can end the last stage.
  template <bool kMem>
  bool LastStage(Terms t, double T, int* parent);

  const PartitionProblem& p_;
  const Lattice& L_;
  Charge charge_ = Charge::kRelay;
  bool allow_empty_ = false;
  std::vector<StageCoef> coef_;
  std::vector<char> cur_, nxt_;
  std::vector<double> dh_, dm_;
  std::vector<int> ah_, am_;
  std::vector<int> parent_;
  int64_t explored_ = 0;
};

// The best split seen: fitting memory first, then the smallest objective.
struct Incumbent {
  std::optional<Partition> best;
  double min_objective = kInf;  // over every split offered, fitting or not
  absl::Status Offer(const PartitionProblem& problem, std::vector<int> stage_of_node);
};

struct SearchResult {
  bool feasible = false;  // some chain passed the test
  double lower = 0;       // largest T shown infeasible (memory-free searches)
  bool stopped = false;
};

// Binary search on T for the current charge; every feasible chain is
// evaluated exactly and offered to the incumbent (unless empty stages are
// allowed). `floor` is a compute-only lower bound on the optimum.
absl::StatusOr<SearchResult> Search(const PartitionProblem& problem, const Lattice& lat,
                                    SeparableDp& dp, bool memory, double floor, Incumbent& inc);

}  // namespace pipeplan::lattice_dp_internal

#endif  // PIPEPLAN_CORE_PARTITION_SEPARABLE_DP_H_
