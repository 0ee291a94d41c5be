#include "pipeplan/core/plan_options.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/enum_names.h"

namespace pipeplan {

namespace {

// In the order the error message offers them.
constexpr auto kMethodNames =
    MakeEnumNames<PartitionMethod>("unknown", {{PartitionMethod::kAuto, "auto"},
                                               {PartitionMethod::kDp, "dp"},
                                               {PartitionMethod::kIdealDp, "ideal_dp"},
                                               {PartitionMethod::kMilp, "milp"},
                                               {PartitionMethod::kUniform, "uniform"},
                                               {PartitionMethod::kParams, "params"},
                                               {PartitionMethod::kTime, "time"}});

}  // namespace

std::string_view PartitionMethodName(PartitionMethod method) { return kMethodNames.Name(method); }

absl::StatusOr<PartitionMethod> ParsePartitionMethod(std::string_view name) {
  return ParseEnumName(kMethodNames, "method", name);
}

}  // namespace pipeplan
