// A progress line for a long search: `pipeplan plan` planning offline (no
// --planner) at thousands of devices, or with --explain, can take seconds.
//
// On a terminal it redraws one line on stderr ("planning: screening shapes
// 37/220, best step 62.3 ms, 1.4 s") at most every 0.1 s, only once the
// search has run 0.5 s (a quick plan prints nothing), and erases it when the
// search ends. Elsewhere (logs, pipes) it prints a plain line at most every
// 5 s, so a search shorter than that prints nothing. The search calls it on
// its own thread; the clock is injectable for tests.
#ifndef PIPEPLAN_CLIENT_CLI_PROGRESS_SEARCH_PROGRESS_LINE_H_
#define PIPEPLAN_CLIENT_CLI_PROGRESS_SEARCH_PROGRESS_LINE_H_

#include <functional>
#include <ostream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pipeplan/core/plan_options.h"

namespace pipeplan::cli {

class SearchProgressLine {
 public:
  SearchProgressLine(
      std::ostream& out, bool terminal,
      std::function<absl::Time()> now = [] { return absl::Now(); });

  // PlanOptions::progress.
  void Update(const SearchProgress& progress);
  // Erases a live line (terminal); call once the search returned.
  void Finish();

  // "screening shapes 37/220, best step 62.3 ms, 1.4 s".
  static std::string Describe(const SearchProgress& progress, absl::Duration elapsed);

 private:
  std::ostream& out_;
  const bool terminal_;
  const std::function<absl::Time()> now_;
  const absl::Time start_;
  absl::Time last_ = absl::InfinitePast();
  bool drawn_ = false;
};

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_PROGRESS_SEARCH_PROGRESS_LINE_H_
