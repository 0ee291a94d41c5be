// Bridges std::string_view and absl::string_view.
//
// Debian's Abseil build does not alias absl::string_view to std::string_view,
// so the two do not convert implicitly; the public API uses the standard type
// and these helpers convert at the Abseil call sites.
#ifndef PIPEPLAN_CORE_SCHEDULE_STRING_UTIL_H_
#define PIPEPLAN_CORE_SCHEDULE_STRING_UTIL_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace pipeplan::schedule::internal {

inline absl::string_view ToAbsl(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view ToStd(absl::string_view s) { return {s.data(), s.size()}; }

// Both ends stripped of ASCII whitespace.
inline std::string_view StripWhitespace(std::string_view s) {
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace pipeplan::schedule::internal

#endif  // PIPEPLAN_CORE_SCHEDULE_STRING_UTIL_H_
