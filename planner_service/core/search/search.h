// The planner's search. Shapes (ranks x replicas) are visited from the
// smallest lower bound up and skipped once the bound cannot beat the best
// plan found. Each shape is screened with the options' first schedule at its
// largest microbatch count on every distinct placement when there are few
// (AllPlacements: exact) or on structured layouts otherwise; the best shape
// then gets its placement improved by swaps (layouts only) and the best
// three every schedule and microbatch count. Screening splits with the fast chain DP;
// the winner is split again with the requested method. A plan with a stage
// that computes nothing is chosen only when nothing else fits.
//
// Internal to the planner. Thread safety: a Search is used by one thread.
#ifndef PIPEPLAN_CORE_SEARCH_SEARCH_H_
#define PIPEPLAN_CORE_SEARCH_SEARCH_H_

#include "absl/status/statusor.h"
#include "candidate.h"

namespace pipeplan::search {

// With `fixed`, only that placement (and its shape) is scored.
absl::StatusOr<PlanResult> RunSearch(const SearchContext& context,
                                     const Placement* fixed = nullptr);

}  // namespace pipeplan::search

#endif  // PIPEPLAN_CORE_SEARCH_SEARCH_H_
