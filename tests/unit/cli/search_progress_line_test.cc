// The search's progress line (`pipeplan plan` offline): silent for quick
// searches, one redrawn line on a terminal, a plain line per 5 s elsewhere,
// erased at the end. A fake clock drives it; no sleeps.
#include "progress/search_progress_line.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace pipeplan::cli {
namespace {

struct FakeClock {
  absl::Time now = absl::UnixEpoch();
  std::function<absl::Time()> Fn() {
    return [this] { return now; };
  }
};

SearchProgress Screening(int done, int total, double best = 0) {
  return {.phase = SearchProgress::Phase::kScreening,
          .done = done,
          .total = total,
          .best_step_seconds = best};
}

TEST(SearchProgressLineTest, DescribesThePhaseCountBestAndTime) {
  EXPECT_EQ(SearchProgressLine::Describe(Screening(3, 10), absl::Milliseconds(1500)),
            "screening shapes 3/10, 1.5 s");
  const SearchProgress sweep{.phase = SearchProgress::Phase::kSweeping,
                             .done = 1,
                             .total = 3,
                             .best_step_seconds = 0.0623};
  const std::string text = SearchProgressLine::Describe(sweep, absl::Seconds(2));
  EXPECT_EQ(text.rfind("sweeping the best shapes 1/3, best step 62.3", 0), 0u) << text;
}

TEST(SearchProgressLineTest, TerminalRedrawsOneLineAfterHalfASecondAndErasesIt) {
  FakeClock clock;
  std::ostringstream out;
  SearchProgressLine line(out, /*terminal=*/true, clock.Fn());
  for (int i = 0; i < 40; ++i) {  // 2 s, a report every 50 ms
    line.Update(Screening(i, 40, 0.5));
    clock.now += absl::Milliseconds(50);
  }
  line.Finish();
  const std::string text = out.str();
  EXPECT_EQ(text.find('\n'), std::string::npos);  // one line, redrawn in place
  const auto redraws = std::count(text.begin(), text.end(), '\r');
  EXPECT_GE(redraws, 14);  // 1.5 s of 10 redraws a second, plus the erase
  EXPECT_LE(redraws, 17);
  EXPECT_NE(text.find("planning: screening shapes 10/40"), std::string::npos) << text;
  EXPECT_EQ(text.substr(text.size() - 4), "\r\033[K");  // erased at the end
}

TEST(SearchProgressLineTest, QuickSearchPrintsNothingAnywhere) {
  for (bool terminal : {true, false}) {
    FakeClock clock;
    std::ostringstream out;
    SearchProgressLine line(out, terminal, clock.Fn());
    for (int i = 0; i < 4; ++i) {
      line.Update(Screening(i, 4));
      clock.now += absl::Milliseconds(100);
    }
    line.Finish();
    EXPECT_EQ(out.str(), "") << terminal;
  }
}

TEST(SearchProgressLineTest, PlainLinesComeEveryFiveSeconds) {
  FakeClock clock;
  std::ostringstream out;
  SearchProgressLine line(out, /*terminal=*/false, clock.Fn());
  for (int i = 0; i <= 120; ++i) {  // 12 s
    line.Update(Screening(i, 120));
    clock.now += absl::Milliseconds(100);
  }
  line.Finish();
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;  // at 5 s and 10 s
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.rfind("planning: screening shapes 50/120, 5.0 s\n", 0), 0u) << text;
}

}  // namespace
}  // namespace pipeplan::cli
