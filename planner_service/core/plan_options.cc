#include "pipeplan/core/plan_options.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pipeplan {

std::string_view PartitionMethodName(PartitionMethod method) {
  switch (method) {
    case PartitionMethod::kAuto:
      return "auto";
    case PartitionMethod::kDp:
      return "dp";
    case PartitionMethod::kMilp:
      return "milp";
    case PartitionMethod::kUniform:
      return "uniform";
    case PartitionMethod::kParams:
      return "params";
    case PartitionMethod::kTime:
      return "time";
    case PartitionMethod::kIdealDp:
      return "ideal_dp";
  }
  return "unknown";
}

absl::StatusOr<PartitionMethod> ParsePartitionMethod(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  for (PartitionMethod m : {PartitionMethod::kAuto, PartitionMethod::kDp, PartitionMethod::kMilp,
                            PartitionMethod::kUniform, PartitionMethod::kParams,
                            PartitionMethod::kTime, PartitionMethod::kIdealDp}) {
    if (lower == PartitionMethodName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown method \"", lower, "\" (auto, dp, ideal_dp, milp, uniform, params, time)"));
}

}  // namespace pipeplan
