// What to change when no candidate fits in memory. Each change is checked
// by splitting one candidate under it: the deepest pipeline the options
// allow, their first schedule, the smallest microbatch, recomputation where
// needed. Only changes that fit are named, never a setting the options
// already have.
//
// Internal to the planner. Thread safety: reentrant.
#ifndef PIPEPLAN_CORE_SEARCH_DIAGNOSE_H_
#define PIPEPLAN_CORE_SEARCH_DIAGNOSE_H_

#include <string>

#include "candidate.h"

namespace pipeplan::search {

// "; " separated changes with numbers ("use 12 devices like gpu0 (80 GiB)
// as 12 ranks", "--microbatches 960", "--optimizer sgd", ...), or "" when
// none that was tried fits. `memory_scale`: how much every device's memory
// would have to grow for the least hungry candidate.
std::string SuggestChanges(const SearchContext& context, double memory_scale);

}  // namespace pipeplan::search

#endif  // PIPEPLAN_CORE_SEARCH_DIAGNOSE_H_
