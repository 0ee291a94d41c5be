#include "pipeplan/common/host_port.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "pipeplan/common/exit_code.h"

namespace pipeplan::common {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view address, absl::string_view why) {
  return UsageError(absl::StrCat("--", flag, ": \"", address, "\" ", why,
                                 " (want HOST:PORT, e.g. 127.0.0.1:7600)"));
}

}  // namespace

absl::Status CheckHostPort(absl::string_view flag, absl::string_view address) {
  if (absl::StartsWith(address, "unix:") && address.size() > 5) return absl::OkStatus();
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return Bad(flag, address, "has no port");
  absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  if (absl::StartsWith(host, "[")) {
    if (!absl::EndsWith(host, "]") || host.size() < 3) return Bad(flag, address, "is not [IPv6]");
  } else if (absl::StrContains(host, ':')) {
    // "::1:7600" is ambiguous; gRPC wants brackets around an IPv6 host.
    return Bad(flag, address, "needs brackets around its IPv6 host ([::1]:7600)");
  }
  if (host.empty()) return Bad(flag, address, "has no host");
  int number = -1;
  if (port.empty() || !absl::SimpleAtoi(port, &number) || number < 0 || number > 65535 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return Bad(flag, address, "has no port number 0..65535");
  }
  return absl::OkStatus();
}

absl::Status CheckHostPortList(absl::string_view flag, absl::string_view addresses) {
  bool any = false;
  for (absl::string_view part : absl::StrSplit(addresses, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty() && absl::StrContains(addresses, ',')) continue;
    if (absl::Status s = CheckHostPort(flag, part); !s.ok()) return s;
    any = true;
  }
  if (!any) return UsageError(absl::StrCat("--", flag, " names no address"));
  return absl::OkStatus();
}

}  // namespace pipeplan::common
