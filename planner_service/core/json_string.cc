#include "pipeplan/core/json_string.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pipeplan {

void AppendQuoted(std::string* out, std::string_view s, ControlEscape control) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (control == ControlEscape::kJson && c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else if (control == ControlEscape::kHex && (c < 0x20 || c == 0x7f)) {
          absl::StrAppend(out, "\\x", absl::Hex(c, absl::kZeroPad2));
        } else {
          out->push_back(static_cast<char>(c));
        }
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
