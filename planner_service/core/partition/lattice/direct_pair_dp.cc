#include "direct_pair_dp.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan::lattice_dp_internal {

bool DirectDp::BuildCrossing(int64_t max_entries) {
  const int N = L_.size();
  IndexSegments();
  std::vector<int> stamp(g_.num_nodes(), -1);
  C_.begin.assign(1, 0);
  C_.begin.reserve(N + 1);
  C_.begin.push_back(0);  // ideal 0 = ∅ crosses nothing
  for (int id = 1; id < N; ++id) {
    const auto [child, u] = ChildAndAddedNode(id);
    AppendCrossing(id, child, u, stamp);
    C_.begin.push_back(static_cast<int64_t>(C_.node.size()));
    if (static_cast<int64_t>(C_.node.size()) > max_entries) return false;
  }
  return true;
}

void DirectDp::IndexSegments() {
  const int N = L_.size();
  const int n = g_.num_nodes();
  seg_of_ideal_.assign(N, 0);
  for (size_t s = 0; s < L_.segs.size(); ++s) {
    const Segment& seg = L_.segs[s];
    for (int q = 0; q < seg.count; ++q) seg_of_ideal_[seg.first + q] = static_cast<int>(s);
  }
  uniform_.assign(n, 1);
  for (int v = 0; v < n; ++v) {
    auto out = g_.out_edges(v);
    for (int e : out) uniform_[v] &= p_.cost->edge_bytes(e) == p_.cost->edge_bytes(out[0]);
  }
}

std::pair<int, int> DirectDp::ChildAndAddedNode(int id) const {
  const Segment& seg = L_.segs[seg_of_ideal_[id]];
  const int q = id - seg.first;
  if (q == 0) return {id - 1, g_.topo_order()[seg.sep_pos]};
  const int child = L_.child[L_.child_begin[id]];
  const uint64_t* a = Mask(id);
  const uint64_t* b = Mask(child);
  int u = -1;
  for (int w = 0; w < seg.words && u < 0; ++w) {
    if (const uint64_t d = a[w] ^ b[w]) u = seg.nodes[w * 64 + __builtin_ctzll(d)];
  }
  return {child, u};
}

void DirectDp::AppendCrossing(int id, int child, int u, std::vector<int>& stamp) {
  for (int e : g_.in_edges(u)) stamp[g_.edge(e).src] = id;
  bool u_done = g_.out_edges(u).empty();
  auto push_u = [&] {
    double b = 0;
    for (int e : g_.out_edges(u)) b = std::max(b, p_.cost->edge_bytes(e));
    C_.node.push_back(u);
    C_.count.push_back(static_cast<int>(g_.out_edges(u).size()));
    C_.bytes.push_back(b);
    u_done = true;
  };
  for (int64_t x = C_.begin[child]; x < C_.begin[child + 1]; ++x) {
    const int v = C_.node[x];
    if (!u_done && u < v) push_u();
    if (stamp[v] != id) {
      C_.node.push_back(v);
      C_.count.push_back(C_.count[x]);
      C_.bytes.push_back(C_.bytes[x]);
      continue;
    }
    int cnt = 0;
    double b = 0;
    for (int e : g_.out_edges(v)) {
      if (Member(id, g_.edge(e).dst)) continue;
      ++cnt;
      b = std::max(b, p_.cost->edge_bytes(e));
    }
    if (cnt > 0) {
      C_.node.push_back(v);
      C_.count.push_back(cnt);
      C_.bytes.push_back(b);
    }
  }
  if (!u_done) push_u();
}

bool DirectDp::UniformLinks() const {
  const auto& dev = p_.stage_device;
  const Cluster& cl = p_.cost->cluster();
  const int k = p_.num_stages();
  for (int a = 0; a < k; ++a) {
    for (int b = a + 1; b < k; ++b) {
      if (dev[a] == dev[b]) return false;
      if (cl.bandwidth(dev[a], dev[b]) != cl.bandwidth(dev[0], dev[std::min(1, k - 1)]) ||
          cl.latency(dev[a], dev[b]) != cl.latency(dev[0], dev[std::min(1, k - 1)])) {
        return false;
      }
    }
  }
  return true;
}

std::vector<DirectDp::StageLinks> DirectDp::MakeLinks(LinkMode mode) const {
  const auto& dev = p_.stage_device;
  const Cluster& cl = p_.cost->cluster();
  const int k = p_.num_stages();
  std::vector<StageLinks> out(k);
  for (int j = 0; j < k; ++j) {
    StageLinks& s = out[j];
    s.slow = p_.cost->slowdown(dev[j]);
    auto add = [](std::vector<Link>& v, Link l) {
      for (const Link& x : v) {
        if (x.a == l.a && x.b == l.b) return;
      }
      v.push_back(l);
    };
    for (int a = 0; a < k; ++a) {
      if (a == j) continue;
      const bool in = a < j;
      if (dev[a] == dev[j]) {
        (in ? s.recv_free : s.send_free) = true;
        continue;
      }
      const int from = in ? dev[a] : dev[j], to = in ? dev[j] : dev[a];
      add(in ? s.recv : s.send, {2 / cl.bandwidth(from, to), 2 * cl.latency(from, to)});
    }
    for (auto [free, v, lb] : {std::tuple(&s.recv_free, &s.recv, &s.recv_lb),
                               std::tuple(&s.send_free, &s.send, &s.send_lb)}) {
      if (mode == LinkMode::kWorst) {
        *free = v->empty();
        if (!v->empty()) {
          Link w{0, 0};
          for (const Link& l : *v) w.a = std::max(w.a, l.a), w.b = std::max(w.b, l.b);
          v->assign(1, w);
        }
      } else if (*free) {
        v->clear();
      }
      *lb = Link{0, 0};
      if (!*free && !v->empty()) {
        *lb = Link{kInf, kInf};
        for (const Link& l : *v) lb->a = std::min(lb->a, l.a), lb->b = std::min(lb->b, l.b);
      }
    }
  }
  return out;
}

double DirectDp::Comm(const StageLinks& s, int I, int J) const {
  int64_t x = C_.begin[I];
  const int64_t xe = C_.begin[I + 1];
  int64_t y = C_.begin[J];
  const int64_t ye = C_.begin[J + 1];
  double recv_bytes_cost = 0;
  const bool do_recv = !s.recv_free && !s.recv.empty();
  const bool do_send = !s.send_free && !s.send.empty();
  while (x < xe || y < ye) {
    const int vx = x < xe ? C_.node[x] : INT32_MAX;
    const int vy = y < ye ? C_.node[y] : INT32_MAX;
    if (vx < vy) {  // every remaining consumer of vx is in J \ I
      if (do_recv) recv_bytes_cost += Charge(s.recv, C_.bytes[x]);
      ++x;
    } else if (vy < vx) {  // produced in J \ I, consumed beyond J
      if (do_send) recv_bytes_cost += Charge(s.send, C_.bytes[y]);
      ++y;
    } else {
      if (do_recv && C_.count[x] > C_.count[y]) {
        double b = C_.bytes[x];
        if (C_.bytes[y] >= b && !uniform_[vx]) {
          b = 0;
          for (int e : g_.out_edges(vx)) {
            const int w = g_.edge(e).dst;
            if (Member(J, w) && !Member(I, w)) b = std::max(b, p_.cost->edge_bytes(e));
          }
        }
        recv_bytes_cost += Charge(s.recv, b);
      }
      ++x;
      ++y;
    }
  }
  return recv_bytes_cost;
}

// One clamped round of the pair DP (see Run in the header): the search grows
// forward from ∅ or backward from V, whichever frontier is far smaller, and
// meets at one cut. Per ideal it keeps the best value of the stages it
// covers (F: every stage non-empty; G: empty stages allowed when kEmpty).
template <bool kEmpty>
class DirectDp::Round {
 public:
  Round(DirectDp& dp, const std::vector<StageLinks>& links, double limit, double clamp,
        int64_t max_pairs);

  // The round's best chain; incomplete when stopped or over the pair budget.
  Result Run();

 private:
  // Sorts the ideals by work and sets, per cut between stages j and j + 1,
  // the work window [lo_w_[j], hi_w_[j]] the stages before and after can
  // hold within thr_.
  void PrepareWindows();
  // by_work_ indices of the ideals that can end stage j.
  std::pair<int, int> Range(int j) const;
  // Extends `s` by stage j. Forward: new ideals J end stage j, the old ones
  // I start it; backward: new ideals I start stage j, old ones J end it.
  // Candidates: forward, the ideals that can end stage j; backward, the
  // ones that can end stage j - 1 (or ∅ for j = 0). False when stopped or
  // over the pair budget.
  bool Step(Side& s, int j, bool forward);
  // The best value of candidate X over the alive ideals of `s`, scanned
  // from the nearest by work; whether X stays alive.
  bool Process(Side& s, const StageLinks& st, int j, bool forward, int X);
  // Makes the new candidates the alive set; every chain below the limit
  // passes through one of them, so their least values raise the clamps.
  void Advance(Side& s, int j);
  // The best chain through the cut between stage a and b = a + 1.
  void Meet(int a, int b, Result& r) const;

  DirectDp& dp_;
  const std::vector<StageLinks>& links_;
  const int N_, k_;
  const double thr_;
  const double* W_;
  const double total_, slack_;
  const int64_t max_pairs_;
  double clamp_f_, clamp_g_;  // `clamp`, raised to the least value at any cut
  std::vector<int> by_work_;
  std::vector<double> sorted_w_, lo_w_, hi_w_, alive_w_;
  Side fw_, bw_;
  int64_t since_check_ = 0;
  bool stopped_ = false;
};

template <bool kEmpty>
DirectDp::Round<kEmpty>::Round(DirectDp& dp, const std::vector<StageLinks>& links, double limit,
                               double clamp, int64_t max_pairs)
    : dp_(dp),
      links_(links),
      N_(dp.L_.size()),
      k_(dp.p_.num_stages()),
      thr_(limit * (1 + 1e-9)),
      W_(dp.L_.work.data()),
      total_(W_[N_ - 1]),
      slack_(1e-9 * total_),
      max_pairs_(max_pairs),
      clamp_f_(clamp),
      clamp_g_(clamp) {}

template <bool kEmpty>
DirectDp::Result DirectDp::Round<kEmpty>::Run() {
  Result r;
  PrepareWindows();
  for (Side* s : {&fw_, &bw_}) {
    s->F.assign(N_, kInf);
    s->G.assign(N_, kInf);
    s->F2.assign(N_, kInf);
    s->G2.assign(N_, kInf);
    s->parent.resize(k_);
  }
  fw_.alive = {0};
  fw_.F[0] = fw_.G[0] = 0;
  bw_.alive = {N_ - 1};
  bw_.F[N_ - 1] = bw_.G[N_ - 1] = 0;
  // fw_ covers stages 0..a (a = -1: nothing yet), bw_ covers b..k-1.
  int a = -1, b = k_;
  while (a + 1 < b) {
    // Grow forward unless the backward frontier is much smaller (a costly
    // tail prunes the backward search early).
    const bool forward = bw_.Frontier() * 8 > fw_.Frontier();
    if (!Step(forward ? fw_ : bw_, forward ? a + 1 : b - 1, forward)) {
      r.stopped = stopped_;
      return r;
    }
    forward ? ++a : --b;
    if ((forward ? fw_ : bw_).alive.empty()) break;
  }
  r.complete = true;
  Meet(a, b, r);
  return r;
}

template <bool kEmpty>
void DirectDp::Round<kEmpty>::PrepareWindows() {
  by_work_.resize(N_);
  for (int i = 0; i < N_; ++i) by_work_[i] = i;
  std::stable_sort(by_work_.begin(), by_work_.end(), [&](int a, int b) { return W_[a] < W_[b]; });
  sorted_w_.resize(N_);
  for (int i = 0; i < N_; ++i) sorted_w_[i] = W_[by_work_[i]];
  lo_w_.resize(k_);
  hi_w_.resize(k_);
  double acc = 0;
  for (int j = 0; j < k_; ++j) hi_w_[j] = (acc += thr_ / links_[j].slow) + slack_;
  acc = 0;
  for (int j = k_ - 1; j >= 0; --j) {
    lo_w_[j] = total_ - acc - slack_;
    acc += thr_ / links_[j].slow;
  }
}

template <bool kEmpty>
std::pair<int, int> DirectDp::Round<kEmpty>::Range(int j) const {
  const int a = static_cast<int>(std::lower_bound(sorted_w_.begin(), sorted_w_.end(), lo_w_[j]) -
                                 sorted_w_.begin());
  const int b = static_cast<int>(std::upper_bound(sorted_w_.begin(), sorted_w_.end(), hi_w_[j]) -
                                 sorted_w_.begin());
  return {a, b};
}

template <bool kEmpty>
bool DirectDp::Round<kEmpty>::Step(Side& s, int j, bool forward) {
  const StageLinks& st = links_[j];
  alive_w_.resize(s.alive.size());
  for (size_t x = 0; x < s.alive.size(); ++x) alive_w_[x] = W_[s.alive[x]];
  s.next.clear();
  int lo, hi;
  if (forward) {
    std::tie(lo, hi) = j == k_ - 1 ? std::pair<int, int>(-1, -1) : Range(j);
  } else {
    std::tie(lo, hi) = j == 0 ? std::pair<int, int>(-1, -1) : Range(j - 1);
  }
  if (lo < 0) {
    const int X = forward ? N_ - 1 : 0;
    if (Process(s, st, j, forward, X)) s.next.push_back(X);
  } else {
    for (int idx = lo; idx < hi; ++idx) {
      const int X = by_work_[idx];
      if (Process(s, st, j, forward, X)) s.next.push_back(X);
      if (since_check_ > (1 << 18)) {
        since_check_ = 0;
        if (dp_.p_.ShouldStop()) {
          stopped_ = true;
          return false;
        }
      }
      if (dp_.pairs_ > max_pairs_) return false;
    }
  }
  Advance(s, j);
  return true;
}

template <bool kEmpty>
bool DirectDp::Round<kEmpty>::Process(Side& s, const StageLinks& st, int j, bool forward, int X) {
  const bool prune = dp_.prune_;
  double bestF = thr_, bestG = thr_;
  int arg = -1;
  if constexpr (kEmpty) bestG = std::min(bestG, s.G[X]);
  const double wx = W_[X];
  const int na = static_cast<int>(s.alive.size());
  int q, end, dir;
  if (forward) {
    q = static_cast<int>(std::upper_bound(alive_w_.begin(), alive_w_.end(), wx + slack_) -
                         alive_w_.begin()) -
        1;
    end = -1;
    dir = -1;
  } else {
    q = static_cast<int>(std::lower_bound(alive_w_.begin(), alive_w_.end(), wx - slack_) -
                         alive_w_.begin());
    end = na;
    dir = 1;
  }
  const int start = q;
  // The fixed end's separable comm bound holds for every pair.
  const double lb_x = !prune ? 0 : forward ? dp_.SendLowerBound(st, X) : dp_.RecvLowerBound(st, X);
  for (; q != end; q += dir) {
    const double compute = std::max((forward ? wx - alive_w_[q] : alive_w_[q] - wx) * st.slow, 0.0);
    if (compute + lb_x >= (kEmpty ? std::max(bestF, bestG) : bestF)) break;
    const int Y = s.alive[q];
    if (!(s.F[Y] < bestF) && !(kEmpty && s.G[Y] < bestG)) continue;
    const double est = compute + lb_x +
                       (!prune    ? 0
                        : forward ? dp_.RecvLowerBound(st, Y)
                                  : dp_.SendLowerBound(st, Y));
    const bool tryF = std::max(s.F[Y], est) < bestF;
    const bool tryG = kEmpty && std::max(s.G[Y], est) < bestG;
    if (!tryF && !tryG) continue;
    const int I = forward ? Y : X, J = forward ? X : Y;
    if (I == J || !dp_.Subset(I, J)) continue;
    ++dp_.pairs_;
    const double c = compute + dp_.Comm(st, I, J);
    if (tryF) {
      const double v = std::max(s.F[Y], c);
      if (v < bestF) bestF = v, arg = Y;
    }
    if constexpr (kEmpty) {
      const double v = std::max(s.G[Y], c);
      if (v < bestG) bestG = v;
    }
    // Nothing below the clamp exists: the first chain reaching it will do.
    if (bestF <= clamp_f_ && (!kEmpty || bestG <= clamp_g_)) break;
  }
  since_check_ += std::abs(q - start) + 1;
  if (arg >= 0) {
    s.F2[X] = bestF;
    s.parent[j].push_back({X, arg});
  }
  if constexpr (kEmpty) {
    if (bestG < thr_) s.G2[X] = bestG;
  }
  return arg >= 0 || (kEmpty && bestG < thr_);
}

template <bool kEmpty>
void DirectDp::Round<kEmpty>::Advance(Side& s, int j) {
  for (int Y : s.alive) s.F[Y] = s.G[Y] = kInf;
  double min_f = kInf, min_g = kInf;
  for (int X : s.next) {
    s.F[X] = s.F2[X];
    s.G[X] = kEmpty ? s.G2[X] : s.F2[X];
    s.F2[X] = s.G2[X] = kInf;
    min_f = std::min(min_f, s.F[X]);
    min_g = std::min(min_g, s.G[X]);
  }
  if (dp_.prune_) {
    clamp_f_ = std::max(clamp_f_, min_f);
    clamp_g_ = std::max(clamp_g_, min_g);
  }
  s.alive.swap(s.next);
  std::sort(s.parent[j].begin(), s.parent[j].end());
}

template <bool kEmpty>
void DirectDp::Round<kEmpty>::Meet(int a, int b, Result& r) const {
  if (a + 1 != b) return;
  int meet = -1;
  double best_bound = kInf;
  for (int X : fw_.alive) {
    if (bw_.F[X] < kInf && fw_.F[X] < kInf) {
      const double v = std::max(fw_.F[X], bw_.F[X]);
      if (v < r.value) r.value = v, meet = X;
    }
    if constexpr (kEmpty) {
      best_bound = std::min(best_bound, std::max(fw_.G[X], bw_.G[X]));
    }
  }
  r.bound = kEmpty ? std::min(best_bound, r.value) : r.value;
  if (meet < 0) return;
  auto find = [](const std::vector<std::pair<int, int>>& v, int x) {
    return std::lower_bound(v.begin(), v.end(), std::pair<int, int>{x, INT32_MIN})->second;
  };
  r.chain.assign(k_ + 1, 0);
  r.chain[a + 1] = meet;
  for (int j = a; j >= 0; --j) r.chain[j] = find(fw_.parent[j], r.chain[j + 1]);
  for (int j = b; j < k_; ++j) r.chain[j + 1] = find(bw_.parent[j], r.chain[j]);
}

DirectDp::Result DirectDp::Run(double limit, double lo, bool allow_empty, int64_t max_pairs,
                               LinkMode mode) {
  const std::vector<StageLinks> links = MakeLinks(mode);
  Result best;
  double L = limit;
  for (double frac = 1e-3;; frac *= 10) {
    const double clamp = prune_ ? std::max(lo, L * (1 - frac)) : 0;
    const bool last = frac >= 1 || clamp <= lo || !prune_;
    Result d = allow_empty ? Round<true>(*this, links, L, clamp, max_pairs).Run()
                           : Round<false>(*this, links, L, clamp, max_pairs).Run();
    ++rounds_;
    if (!d.complete) {
      best.stopped = d.stopped;
      return best;  // incomplete; best.chain may still be a good split
    }
    if (!d.chain.empty() && d.value < best.value) {
      best.value = d.value;
      best.chain = std::move(d.chain);
    }
    const bool exact = d.value > clamp && (!allow_empty || d.bound > clamp);
    if (exact || last) {
      best.complete = true;
      // Nothing below L: L bounds the minimum (L < limit only after a chain
      // of value L was found; otherwise the caller's split bounds it).
      const double none = L < limit ? L : kInf;
      best.bound =
          allow_empty ? (d.bound < kInf ? d.bound : none) : (best.value < kInf ? best.value : none);
      return best;
    }
    if (d.value < kInf) L = std::min(L, d.value);
  }
}

absl::StatusOr<PairDpResult> DirectPairOptimum(const PartitionProblem& problem, bool prune,
                                               bool slowest_links) {
  PIPEPLAN_ASSIGN_OR_RETURN(Lattice lat,
                            BuildLattice(problem.graph(), problem.cost, LatticeLimits{}, &problem));
  DirectDp direct(problem, lat);
  if (!direct.BuildCrossing(kMaxCrossingEntries)) {
    return absl::ResourceExhaustedError("crossing lists over budget");
  }
  direct.set_prune(prune);
  const bool glued = std::any_of(lat.glue.begin(), lat.glue.end(), [](int c) { return c >= 0; });
  DirectDp::Result d =
      direct.Run(kInf, 0, glued, kMaxPairs, slowest_links ? LinkMode::kWorst : LinkMode::kFastest);
  if (!d.complete) return absl::ResourceExhaustedError("pair DP incomplete");
  PairDpResult out;
  out.value = d.value;
  out.bound = d.bound;
  out.pairs = direct.pairs();
  if (!d.chain.empty()) out.stage_of_node = StageOfNode(problem.graph(), lat, d.chain);
  return out;
}

}  // namespace pipeplan::lattice_dp_internal
