#include "search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "diagnose.h"
#include "search_space.h"

namespace pipeplan::search {
namespace {

using schedule::ScheduleKind;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr size_t kMaxAlternatives = 8;
constexpr size_t kSweptShapes = 3;
constexpr int kSwapRounds = 2;
constexpr size_t kSwapsPerRound = 32;
// Moves a round samples its swaps from: every distinct move of a placement
// of a few hundred slots; of larger ones an evenly spaced share.
constexpr int64_t kMovesConsidered = 20000;

// Placements a shape may enumerate before it falls back to layouts: fewer
// on large graphs, where scoring one costs more.
int64_t ExhaustiveLimit(const Graph& graph) {
  return std::clamp<int64_t>(100000 / std::max(1, graph.num_nodes()), 24, 2000);
}

struct Scored {
  Candidate candidate;
  Placement placement;
  PlanResult plan;
  double unit = kInf;                             // SecondsPerUnit
  PartitionMethod method = PartitionMethod::kDp;  // what split it
};

// Degenerate plans last, then the fastest.
bool Better(const Scored& a, const Scored& b) {
  return std::pair(a.plan.degenerate(), a.unit) < std::pair(b.plan.degenerate(), b.unit);
}

PlanAlternative AlternativeOf(const Scored& s, int devices) {
  const PlanResult& p = s.plan;
  return {.schedule = p.schedule,
          .microbatches = p.microbatches,
          .num_ranks = p.num_ranks,
          .num_replicas = p.num_replicas,
          .step_seconds = p.step_seconds,
          .peak_memory_bytes =
              *std::max_element(p.stage_peak_memory.begin(), p.stage_peak_memory.end()),
          .bubble_ratio = p.bubble_ratio,
          .idle_devices = devices - p.num_ranks * p.num_replicas,
          .degenerate = p.degenerate_reason};
}

class Search {
 public:
  Search(const SearchContext& ctx, const Placement* fixed)
      : ctx_(ctx),
        split_graph_(ctx.groups ? *ctx.groups->graph : *ctx.graph),
        fixed_(fixed),
        bounds_(MakeBoundInputs(*ctx.graph, *ctx.cluster, *ctx.options)) {}

  absl::StatusOr<PlanResult> Run();

 private:
  struct ShapeState {
    std::optional<size_t> best;  // index into scored_
    std::string placement;       // "exhaustive" or "layouts"
  };

  bool Stopped() const {
    return absl::Now() >= ctx_.deadline ||
           (ctx_.options->cancelled != nullptr && ctx_.options->cancelled->load());
  }
  std::optional<size_t> Score(const Candidate& c, const Placement& placement,
                              PartitionMethod method);
  std::optional<Candidate> ScreeningCandidate(const Shape& shape) const;
  void ScreenShape(const Shape& shape, bool single);
  bool CannotBeSwept(const Shape& shape) const;
  void Screen(const std::vector<Shape>& shapes, bool single);
  void ImprovePlacement(const Shape& shape);
  void Sweep(const Shape& shape);
  bool CannotWin(const Candidate& c) const;
  void Refine(Scored& winner);
  absl::Status NothingFound() const;
  PlanResult Finish(size_t winner);
  void Report(SearchProgress::Phase phase, size_t done, size_t total) const;

  const SearchContext& ctx_;
  const Graph& split_graph_;
  const Placement* fixed_;
  const BoundInputs bounds_;
  std::vector<Scored> scored_;
  std::vector<double> swept_units_;       // the kSweptShapes least shape bests screened, ascending
  std::map<int, std::vector<int>> warm_;  // stages -> the last chain DP split of that many
  std::map<std::pair<int, int>, ShapeState> shapes_;
  double least_bound_ = kInf;  // no shape's plan beats it
  std::optional<size_t> best_;
  absl::Status first_error_ = absl::OkStatus();
  double least_scale_ = kInf;  // memory growth the least hungry failed candidate needed
};

std::optional<size_t> Search::Score(const Candidate& c, const Placement& placement,
                                    PartitionMethod method) {
  double needed = kInf;
  // The last chain DP split of as many stages starts the next: alike
  // pipelines often share the optimum's bottleneck (see chain_dp.cc).
  const int stages = c.ranks * c.chunks_per_rank;
  const bool warm = method == PartitionMethod::kDp && ctx_.groups == nullptr;
  std::span<const int> start;
  if (auto it = warm_.find(stages); warm && it != warm_.end()) start = it->second;
  absl::StatusOr<PlanResult> plan = EvaluateCandidate(ctx_, c, placement, method, &needed, start);
  if (plan.ok() && warm) warm_[stages] = plan->partition.stage_of_node;
  if (!plan.ok()) {
    const bool memory = plan.status().code() == absl::StatusCode::kFailedPrecondition;
    if (memory) least_scale_ = std::min(least_scale_, needed);
    if (first_error_.ok() ||
        (memory && first_error_.code() != absl::StatusCode::kFailedPrecondition)) {
      first_error_ = plan.status();
    }
    return std::nullopt;
  }
  Scored s{c, placement, *std::move(plan)};
  s.unit = SecondsPerUnit(ctx_, s.plan);
  s.method = method;
  const size_t index = scored_.size();
  scored_.push_back(std::move(s));
  ShapeState& shape = shapes_[{c.ranks, c.replicas}];
  if (!shape.best || Better(scored_[index], scored_[*shape.best])) shape.best = index;
  if (!best_ || Better(scored_[index], scored_[*best_])) best_ = index;
  return index;
}

// The options' first schedule that fits the shape, at its largest
// microbatch count.
std::optional<Candidate> Search::ScreeningCandidate(const Shape& shape) const {
  for (ScheduleKind kind : KindsToTry(*ctx_.options)) {
    const int chunks = ChunksPerRank(kind, *ctx_.options);
    if (int64_t{shape.ranks} * chunks > split_graph_.num_nodes()) continue;  // 64-bit: any chunks
    const std::vector<int> ms = MicrobatchesToTry(*ctx_.options, shape.ranks, shape.replicas);
    return Candidate{kind, shape.ranks, shape.replicas, chunks, ms.back()};
  }
  return std::nullopt;
}

void Search::ScreenShape(const Shape& shape, bool single) {
  std::optional<Candidate> c = ScreeningCandidate(shape);
  if (!c) return;
  ShapeState& state = shapes_[{shape.ranks, shape.replicas}];
  std::optional<std::vector<Placement>> placements;
  if (fixed_ != nullptr) {
    placements = {*fixed_};
    state.placement = "given";
  } else {
    placements =
        AllPlacements(ctx_.order, shape.ranks, shape.replicas, ExhaustiveLimit(split_graph_));
    state.placement = placements ? "exhaustive" : "layouts";
  }
  if (!placements) {
    placements = LayoutPlacements(*ctx_.cluster, ctx_.order, shape.ranks, shape.replicas);
  }
  // One candidate on one placement is solved with the requested method
  // directly; otherwise the fast DP screens and the winner is refined.
  const bool direct = single && placements->size() == 1;
  for (const Placement& placement : *placements) {
    if (Stopped()) return;
    Score(*c, placement, direct ? ctx_.options->method : PartitionMethod::kDp);
  }
}

void Search::ImprovePlacement(const Shape& shape) {
  ShapeState& state = shapes_[{shape.ranks, shape.replicas}];
  if (!state.best || state.placement != "layouts") return;
  for (int round = 0; round < kSwapRounds && !Stopped(); ++round) {
    const Scored start = scored_[*state.best];
    const std::vector<PlacementMove> next =
        DistinctMoves(ctx_.order, start.placement, kMovesConsidered);
    const size_t stride = std::max<size_t>(1, next.size() / kSwapsPerRound);
    for (size_t i = 0; i < next.size() && !Stopped(); i += stride) {
      Score(start.candidate, ApplyMove(start.placement, next[i]), PartitionMethod::kDp);
    }
    if (scored_[*state.best].unit >= start.unit) break;
  }
}

void Search::Sweep(const Shape& shape) {
  ShapeState& state = shapes_[{shape.ranks, shape.replicas}];
  if (!state.best) return;
  const Scored start = scored_[*state.best];
  for (ScheduleKind kind : KindsToTry(*ctx_.options)) {
    const int chunks = ChunksPerRank(kind, *ctx_.options);
    if (int64_t{shape.ranks} * chunks > split_graph_.num_nodes()) continue;   // 64-bit: any chunks
    if (shape.ranks == 1 && chunks > 1 && !ctx_.options->schedule) continue;  // same as GPipe
    for (int m : MicrobatchesToTry(*ctx_.options, shape.ranks, shape.replicas)) {
      if (Stopped()) return;
      const Candidate c{kind, shape.ranks, shape.replicas, chunks, m};
      if (kind == start.candidate.kind && m == start.candidate.microbatches) continue;
      if (CannotWin(c)) continue;
      Score(c, start.placement, PartitionMethod::kDp);
    }
  }
}

// Whether the candidate provably trains slower than the best plan found.
// Only with a global batch, where the sweep tries every microbatch count the
// batch allows; without one it tries one count per schedule, and every
// candidate it scores is listed among the alternatives.
bool Search::CannotWin(const Candidate& c) const {
  if (ctx_.options->global_batch <= 0 || !best_ || scored_[*best_].plan.degenerate()) return false;
  return CandidateLowerBound(bounds_, Shape{c.ranks, c.replicas}, c.kind, c.microbatches) >=
         scored_[*best_].unit;
}

// Re-solves the winner with the requested method. Same candidate, so the
// refined solve's bound holds for the screening split too. `auto` keeps
// whichever split simulates faster; a named method's split is returned as
// that method found it, and when the method cannot split the candidate the
// plan keeps the screening split and says why.
void Search::Refine(Scored& winner) {
  const PartitionMethod requested = ctx_.options->method;
  if (winner.method == requested) return;
  absl::StatusOr<PlanResult> refined =
      EvaluateCandidate(ctx_, winner.candidate, winner.placement, requested);
  PlanResult& best = winner.plan;
  if (!refined.ok()) {
    if (requested == PartitionMethod::kAuto) return;
    best.candidates.push_back({.method = std::string(PartitionMethodName(requested)),
                               .note = absl::StrFormat("not used: %s; the plan keeps the %s split",
                                                       refined.status().message(), best.method)});
    return;
  }
  const bool named = requested != PartitionMethod::kAuto;
  if (named || SecondsPerUnit(ctx_, *refined) <= winner.unit) {
    refined->lower_bound = std::max(refined->lower_bound, best.lower_bound);
    best = *std::move(refined);
    winner.unit = SecondsPerUnit(ctx_, best);
    winner.method = requested;
  } else {
    // A lower bottleneck can still simulate to a longer step; the report
    // says which split was kept and why.
    best.lower_bound = std::max(best.lower_bound, refined->lower_bound);
    best.nodes_explored += refined->nodes_explored;
    best.candidates = std::move(refined->candidates);
    best.candidates.push_back(
        {.method = best.method,
         .objective = best.partition.objective,
         .note = absl::StrFormat("kept: the search's split simulates to a shorter step "
                                 "(%.6g s) than the best split above (%.6g s)",
                                 best.step_seconds, refined->step_seconds)});
  }
  best.lower_bound = std::min(best.lower_bound, best.partition.objective);
  best.partition.lower_bound = best.lower_bound;
  const double obj = best.partition.objective;
  best.gap = obj > 0 && std::isfinite(obj) ? std::max(0.0, (obj - best.lower_bound) / obj) : 0;
}

absl::Status Search::NothingFound() const {
  if (std::isfinite(least_scale_)) {
    double largest = 0;
    for (int d = 0; d < ctx_.cluster->num_devices(); ++d) {
      largest = std::max(largest, ctx_.cluster->device(d).memory_bytes);
    }
    const std::string change = SuggestChanges(ctx_, least_scale_);
    return absl::FailedPreconditionError(absl::StrFormat(
        "no plan fits in memory, even recomputing activations: the least hungry plan needs "
        "about %.2f GiB per device (%.3g bytes), %.2fx the %.2f GiB of the largest device; %s",
        largest * least_scale_ / (1 << 30), largest * least_scale_, least_scale_,
        largest / (1 << 30),
        change.empty()
            ? "no single change tried (more devices, a deeper pipeline, smaller microbatches, cut "
              "granularity, optimizer, precision) fits"
            : absl::StrCat("a plan fits with: ", change)));
  }
  if (!first_error_.ok()) return first_error_;
  if (Stopped() && ctx_.options->cancelled != nullptr && ctx_.options->cancelled->load()) {
    return absl::CancelledError("planning was cancelled");
  }
  if (Stopped()) {
    return absl::DeadlineExceededError("the time limit ran out before any candidate was planned");
  }
  return absl::FailedPreconditionError("no schedule, depth and microbatch count fits");
}

// Whether the shape's screening candidate provably scores worse than the
// kSweptShapes best shapes screened so far: then it is not swept (only
// those are, and the best only get better) nor the best, so screening it
// changes nothing the search returns.
bool Search::CannotBeSwept(const Shape& shape) const {
  if (swept_units_.size() < kSweptShapes) return false;
  std::optional<Candidate> c = ScreeningCandidate(shape);
  if (!c) return false;
  return CandidateLowerBound(bounds_, shape, c->kind, c->microbatches) > swept_units_.back();
}

void Search::Screen(const std::vector<Shape>& shapes, bool single) {
  std::vector<double> bound;
  for (const Shape& s : shapes) bound.push_back(ShapeLowerBound(bounds_, s));
  std::vector<size_t> order(shapes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bound[a] < bound[b]; });
  if (!bound.empty()) least_bound_ = bound[order.front()];
  for (size_t n = 0; n < order.size(); ++n) {
    const size_t i = order[n];
    Report(SearchProgress::Phase::kScreening, n, order.size());
    if (Stopped()) break;
    // Nothing of this shape can beat the best plan; the bounds only grow.
    if (best_ && !scored_[*best_].plan.degenerate() && bound[i] >= scored_[*best_].unit) break;
    if (CannotBeSwept(shapes[i])) continue;
    ScreenShape(shapes[i], single);
    const ShapeState& state = shapes_[{shapes[i].ranks, shapes[i].replicas}];
    if (!state.best) continue;
    swept_units_.push_back(scored_[*state.best].unit);
    std::sort(swept_units_.begin(), swept_units_.end());
    if (swept_units_.size() > kSweptShapes) swept_units_.pop_back();
  }
  Report(SearchProgress::Phase::kScreening, order.size(), order.size());
}

void Search::Report(SearchProgress::Phase phase, size_t done, size_t total) const {
  if (!ctx_.options->progress) return;
  ctx_.options->progress({.phase = phase,
                          .done = static_cast<int>(done),
                          .total = static_cast<int>(total),
                          .best_step_seconds = best_ ? scored_[*best_].plan.step_seconds : 0});
}

absl::StatusOr<PlanResult> Search::Run() {
  std::vector<Shape> shapes = ShapesToTry(split_graph_, *ctx_.cluster, *ctx_.options);
  if (fixed_ != nullptr) shapes = {Shape{fixed_->ranks, fixed_->replicas}};
  const bool single =
      shapes.size() == 1 && KindsToTry(*ctx_.options).size() == 1 && ctx_.options->microbatches > 0;
  Screen(shapes, single);
  std::vector<std::pair<double, Shape>> ranked;
  for (const auto& [key, state] : shapes_) {
    if (state.best) ranked.push_back({scored_[*state.best].unit, Shape{key.first, key.second}});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  const size_t sweeps = std::min(ranked.size(), kSweptShapes);
  for (size_t i = 0; i < sweeps; ++i) {
    Report(SearchProgress::Phase::kSweeping, i, sweeps);
    if (i == 0) ImprovePlacement(ranked[i].second);
    Sweep(ranked[i].second);
  }
  Report(SearchProgress::Phase::kSweeping, sweeps, sweeps);
  if (!best_) return NothingFound();
  Refine(scored_[*best_]);
  return Finish(*best_);
}

PlanResult Search::Finish(size_t winner) {
  const int devices = ctx_.cluster->num_devices();
  const Scored& w = scored_[winner];
  std::vector<size_t> order(scored_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return Better(scored_[a], scored_[b]); });
  PlanResult out = w.plan;
  out.placement = shapes_[{w.candidate.ranks, w.candidate.replicas}].placement;
  if (std::isfinite(least_bound_) && w.unit > 0) {
    out.search_gap = std::max(0.0, (w.unit - least_bound_) / w.unit);
  }
  std::set<std::tuple<int, int, int, int>> listed = {{static_cast<int>(w.candidate.kind),
                                                      w.candidate.ranks, w.candidate.replicas,
                                                      w.candidate.microbatches}};
  std::set<std::pair<int, int>> shapes_listed;
  for (size_t i : order) {
    const Scored& s = scored_[i];
    const Candidate& c = s.candidate;
    if (shapes_listed.insert({c.ranks, c.replicas}).second) {
      out.shapes.push_back(AlternativeOf(s, devices));
    }
    if (out.alternatives.size() < kMaxAlternatives &&
        listed.insert({static_cast<int>(c.kind), c.ranks, c.replicas, c.microbatches}).second) {
      out.alternatives.push_back(AlternativeOf(s, devices));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<PlanResult> RunSearch(const SearchContext& context, const Placement* fixed) {
  Search search(context, fixed);
  return search.Run();
}

}  // namespace pipeplan::search
