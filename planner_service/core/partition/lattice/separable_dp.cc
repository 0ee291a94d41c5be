#include "separable_dp.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "pipeplan/common/status_macros.h"

namespace pipeplan::lattice_dp_internal {

SeparableDp::SeparableDp(const PartitionProblem& p, const Lattice& lat) : p_(p), L_(lat) {
  const int N = L_.size();
  const int k = p_.num_stages();
  cur_.assign(N, 0);
  nxt_.assign(N, 0);
  dh_.assign(N, -kInf);
  dm_.assign(N, -kInf);
  ah_.assign(N, -1);
  am_.assign(N, -1);
  parent_.assign(static_cast<size_t>(N) * k, -1);
  coef_.resize(k);
}

void SeparableDp::SetCharge(Charge charge) {
  const int k = p_.num_stages();
  const CostModel& cost = *p_.cost;
  const Cluster& cl = cost.cluster();
  const auto& dev = p_.stage_device;
  charge_ = charge;
  for (int j = 0; j < k; ++j) {
    StageCoef& c = coef_[j];
    c = StageCoef{};
    c.slow = cost.slowdown(dev[j]);
    c.psf = cost.param_state_factor();
    c.inflight = j < static_cast<int>(p_.stage_inflight.size()) ? p_.stage_inflight[j] : 1;
    c.cap = StageMemoryCap(p_, j) * (1 + 1e-12);
    if (charge == Charge::kRelay) {
      if (j > 0 && dev[j - 1] != dev[j]) {
        c.lb = 2 / cl.bandwidth(dev[j - 1], dev[j]);
        c.lc = 2 * cl.latency(dev[j - 1], dev[j]);
      }
      if (j + 1 < k && dev[j + 1] != dev[j]) {
        c.rb = 2 / cl.bandwidth(dev[j], dev[j + 1]);
        c.rc = 2 * cl.latency(dev[j], dev[j + 1]);
      }
    } else {
      // Fastest link from any earlier (to any later) stage's device; free
      // when one of them shares this device.
      auto fastest = [&](int from, int to, bool incoming, double* cb, double* cc) {
        double bw = 0, lat = kInf;
        for (int a = from; a < to; ++a) {
          if (dev[a] == dev[j]) return;
          const int s = incoming ? dev[a] : dev[j], t = incoming ? dev[j] : dev[a];
          bw = std::max(bw, cl.bandwidth(s, t));
          lat = std::min(lat, cl.latency(s, t));
        }
        if (from < to) {
          *cb = 2 / bw;
          *cc = 2 * lat;
        }
      };
      fastest(0, j, true, &c.lb, &c.lc);
      fastest(j + 1, k, false, &c.rb, &c.rc);
    }
  }
}

// Stage j's terms of an ideal over the lattice's arrays (see StageCoef).
struct SeparableDp::Terms {
  const double *W, *LB, *LC, *RB, *RC, *P, *A;
  StageCoef c;
  double h(int id) const { return W[id] * c.slow - (c.lb * LB[id] + c.lc * LC[id]); }
  double g(int id) const { return W[id] * c.slow + c.rb * RB[id] + c.rc * RC[id]; }
  double m(int id) const { return c.psf * P[id] + c.inflight * A[id]; }
  // The parent that lets J = id end the stage, given the best-h candidate
  // (bh, ah) and the best-m one (bm, am); -1 when neither does.
  template <bool kMem>
  int Accept(double T, int id, double bh, int ah, double bm, int am) const {
    if (ah < 0) return -1;
    const double need = g(id) - T;
    if constexpr (!kMem) {
      return bh >= need ? ah : -1;
    } else {
      const double mneed = m(id) - c.cap;
      if (bh >= need && m(ah) >= mneed) return ah;
      if (bm >= mneed && h(am) >= need) return am;
      return -1;
    }
  }
};

// Stage by stage: S_{j+1} = the ideals J some I ∈ S_j ⊊ J lets end stage j,
// the best I found through the down-set maxima dh_/dm_ in one pass in
// inclusion order. Fills parent_.
template <bool kMem>
bool SeparableDp::Feasible(double T) {
  const int N = L_.size();
  const int k = p_.num_stages();
  const bool relay = charge_ == Charge::kRelay;
  Terms t{.W = L_.work.data(),
          .LB = relay ? L_.cut_bytes.data() : L_.in_bytes.data(),
          .LC = relay ? L_.cut_count.data() : L_.in_count.data(),
          .RB = relay ? L_.cut_bytes.data() : L_.out_bytes.data(),
          .RC = relay ? L_.cut_count.data() : L_.out_count.data(),
          .P = L_.params.data(),
          .A = L_.acts.data()};
  std::fill(cur_.begin(), cur_.end(), 0);
  cur_[0] = 1;
  for (int j = 0; j < k; ++j) {
    t.c = coef_[j];
    int* parent = &parent_[static_cast<size_t>(j) * N];
    explored_ += N;
    if (j == k - 1) return LastStage<kMem>(t, T, parent);
    if (!AdvanceStage<kMem>(t, T, parent)) return false;
    cur_.swap(nxt_);
  }
  return false;  // unreachable: the last stage returns
}

template <bool kMem>
bool SeparableDp::AdvanceStage(Terms t, double T, int* parent) {
  const int N = L_.size();
  const int* cb = L_.child_begin.data();
  const int* ch = L_.child.data();
  bool any = false;
  for (int id = 0; id < N; ++id) {
    double bh = -kInf, bm = -kInf;
    int ah = -1, am = -1;
    for (int q = cb[id]; q < cb[id + 1]; ++q) {
      const int x = ch[q];
      if (dh_[x] > bh) bh = dh_[x], ah = ah_[x];
      if constexpr (kMem) {
        if (dm_[x] > bm) bm = dm_[x], am = am_[x];
      }
    }
    int par = t.Accept<kMem>(T, id, bh, ah, bm, am);
    if (par < 0 && allow_empty_ && cur_[id]) par = id;
    parent[id] = par;
    nxt_[id] = par >= 0;
    any |= par >= 0;
    if (cur_[id]) {
      if (const double v = t.h(id); v > bh) bh = v, ah = id;
      if constexpr (kMem) {
        if (const double v = t.m(id); v > bm) bm = v, am = id;
      }
    }
    dh_[id] = bh;
    ah_[id] = ah;
    if constexpr (kMem) {
      dm_[id] = bm;
      am_[id] = am;
    }
  }
  return any;
}

template <bool kMem>
bool SeparableDp::LastStage(Terms t, double T, int* parent) {
  const int N = L_.size();
  // Only J = V matters.
  double bh = -kInf, bm = -kInf;
  int ah = -1, am = -1;
  for (int id = 0; id < N - 1; ++id) {
    if (!cur_[id]) continue;
    if (const double v = t.h(id); v > bh) bh = v, ah = id;
    if constexpr (kMem) {
      if (const double v = t.m(id); v > bm) bm = v, am = id;
    }
  }
  parent[N - 1] = t.Accept<kMem>(T, N - 1, bh, ah, bm, am);
  if (allow_empty_ && cur_[N - 1]) parent[N - 1] = N - 1;
  return parent[N - 1] >= 0;
}

bool SeparableDp::Feasible(double T, bool memory) {
  return memory ? Feasible<true>(T) : Feasible<false>(T);
}

std::vector<int> SeparableDp::Chain() const {
  const int N = L_.size();
  const int k = p_.num_stages();
  std::vector<int> chain(k + 1);
  chain[k] = N - 1;
  for (int j = k - 1; j >= 0; --j) {
    chain[j] = parent_[static_cast<size_t>(j) * N + chain[j + 1]];
  }
  return chain;
}

double SeparableDp::ChainCharge(const std::vector<int>& chain) const {
  const bool relay = charge_ == Charge::kRelay;
  double worst = 0;
  for (int j = 0; j + 1 < static_cast<int>(chain.size()); ++j) {
    const StageCoef& c = coef_[j];
    const int i = chain[j], J = chain[j + 1];
    const double left = relay ? c.lb * L_.cut_bytes[i] + c.lc * L_.cut_count[i]
                              : c.lb * L_.in_bytes[i] + c.lc * L_.in_count[i];
    const double right = relay ? c.rb * L_.cut_bytes[J] + c.rc * L_.cut_count[J]
                               : c.rb * L_.out_bytes[J] + c.rc * L_.out_count[J];
    worst = std::max(worst, (L_.work[J] - L_.work[i]) * c.slow + left + right);
  }
  return worst;
}

absl::Status Incumbent::Offer(const PartitionProblem& problem, std::vector<int> stage_of_node) {
  PIPEPLAN_ASSIGN_OR_RETURN(Partition p, MakePartition(problem, std::move(stage_of_node)));
  min_objective = std::min(min_objective, p.objective);
  if (!best || (p.fits_memory && !best->fits_memory) ||
      (p.fits_memory == best->fits_memory && p.objective < best->objective)) {
    best = std::move(p);
  }
  return absl::OkStatus();
}

absl::StatusOr<SearchResult> Search(const PartitionProblem& problem, const Lattice& lat,
                                    SeparableDp& dp, bool memory, double floor, Incumbent& inc) {
  SearchResult r;
  if (!dp.Feasible(kInf, memory)) return r;
  r.feasible = true;
  std::vector<int> chain = dp.Chain();
  if (!dp.allow_empty())
    PIPEPLAN_RETURN_IF_ERROR(inc.Offer(problem, StageOfNode(problem.graph(), lat, chain)));
  double hi = dp.ChainCharge(chain);
  // Every stage charge is at least its compute, so `floor` (a compute-only
  // bound) is below the optimum; a hair lower is infeasible.
  double lo = std::min(floor * (1 - 1e-9), hi * (1 - 1e-9));
  for (int it = 0; it < 200 && hi - lo > 1e-7 * hi; ++it) {
    if (problem.ShouldStop()) {
      r.stopped = true;
      break;
    }
    const double mid = lo + (hi - lo) / 2;
    if (dp.Feasible(mid, memory)) {
      chain = dp.Chain();
      hi = std::min(mid, dp.ChainCharge(chain));
      if (!dp.allow_empty())
        PIPEPLAN_RETURN_IF_ERROR(inc.Offer(problem, StageOfNode(problem.graph(), lat, chain)));
    } else {
      lo = mid;
    }
  }
  r.lower = lo;
  return r;
}

}  // namespace pipeplan::lattice_dp_internal
