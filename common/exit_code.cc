#include "pipeplan/common/exit_code.h"

#include "absl/strings/cord.h"

namespace pipeplan::common {
namespace {

constexpr absl::string_view kUsagePayload = "type.pipeplan.dev/cmdline.usage";

}  // namespace

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument &&
         status.GetPayload(kUsagePayload).has_value();
}

int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  if (IsUsageError(status)) return kExitUsage;
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    default:
      return kExitError;
  }
}

}  // namespace pipeplan::common
