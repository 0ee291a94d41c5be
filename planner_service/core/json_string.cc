#include "pipeplan/core/json_string.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pipeplan {

namespace {

// Quote, backslash, newline, return and tab: written as a backslash and one
// character.
constexpr std::pair<unsigned char, std::string_view> kShortEscapes[] = {
    {'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"}, {'\t', "\\t"}};

std::string_view ShortEscape(unsigned char c) {
  for (const auto& [from, to] : kShortEscapes) {
    if (c == from) return to;
  }
  return {};
}

}  // namespace

void AppendQuoted(std::string* out, std::string_view s, ControlEscape control) {
  out->push_back('"');
  for (unsigned char c : s) {
    if (std::string_view e = ShortEscape(c); !e.empty()) {
      out->append(e);
    } else if (control == ControlEscape::kJson && c < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", c);
    } else if (control == ControlEscape::kHex && (c < 0x20 || c == 0x7f)) {
      absl::StrAppend(out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

std::string JsonString(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  AppendQuoted(&out, s, ControlEscape::kJson);
  return out;
}

}  // namespace pipeplan
