#include "progress/search_progress_line.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "plan_table.h"

namespace pipeplan::cli {
namespace {

constexpr absl::Duration kQuietFor = absl::Milliseconds(500);  // terminal: quick plans stay silent
constexpr absl::Duration kRedraw = absl::Milliseconds(100);
constexpr absl::Duration kPlainEvery = absl::Seconds(5);

}  // namespace

SearchProgressLine::SearchProgressLine(std::ostream& out, bool terminal,
                                       std::function<absl::Time()> now)
    : out_(out), terminal_(terminal), now_(std::move(now)), start_(now_()) {}

std::string SearchProgressLine::Describe(const SearchProgress& p, absl::Duration elapsed) {
  const char* what = p.phase == SearchProgress::Phase::kScreening ? "screening shapes"
                                                                  : "sweeping the best shapes";
  std::string out = absl::StrFormat("%s %d/%d", what, p.done, p.total);
  if (p.best_step_seconds > 0) {
    out += absl::StrFormat(", best step %s", HumanSeconds(p.best_step_seconds));
  }
  return out + absl::StrFormat(", %.1f s", absl::ToDoubleSeconds(elapsed));
}

void SearchProgressLine::Update(const SearchProgress& p) {
  const absl::Time now = now_();
  const absl::Duration elapsed = now - start_;
  if (terminal_) {
    if (elapsed < kQuietFor || now - last_ < kRedraw) return;
    out_ << "\r\033[Kplanning: " << Describe(p, elapsed) << std::flush;
    drawn_ = true;
  } else {
    if (elapsed < kPlainEvery || now - last_ < kPlainEvery) return;
    out_ << "planning: " << Describe(p, elapsed) << "\n" << std::flush;
  }
  last_ = now;
}

void SearchProgressLine::Finish() {
  if (drawn_) out_ << "\r\033[K" << std::flush;
  drawn_ = false;
}

}  // namespace pipeplan::cli
