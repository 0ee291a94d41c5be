#include "json_text.h"

#include "absl/strings/str_format.h"

namespace pipeplan::cli {

std::string JsonNumber(double x) { return absl::StrFormat("%.17g", x); }

}  // namespace pipeplan::cli
