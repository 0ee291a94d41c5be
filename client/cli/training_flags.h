// The training flags of `jobs create` (--model-package, --optimizer, --data,
// ...), turned into a TrainingSpec after checking the package against the
// graph, so a mismatched package fails at `jobs create`, not on a worker.
#ifndef PIPEPLAN_CLIENT_CLI_TRAINING_FLAGS_H_
#define PIPEPLAN_CLIENT_CLI_TRAINING_FLAGS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "pipeplan/common/flag_set.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::cli {

// --model-package, --data, --batch-size, --optimizer, --lr, ... .
const common::FlagSet& TrainingFlags();

// nullopt without --model-package (a planning-only job). Paths become
// absolute (workers run elsewhere); the package's manifest is read and its
// nodes checked against `graph`; --loss defaults to the package's.
// Flag mistakes are usage errors naming the flag.
absl::StatusOr<std::optional<v1::TrainingSpec>> TrainingSpecFromFlags(
    const common::ParsedFlags& flags, const v1::ModelGraph& graph);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_TRAINING_FLAGS_H_
