// Reading a model package (pipeplan_export.py --package) and its compiled
// stages (pipeplan_stage_compile.py) from disk, and checking a package
// against the job's graph. The formats are in docs/model-package.md; the
// CLI checks at `jobs create`, the worker again before it trains.
#ifndef PIPEPLAN_CLIENT_MODEL_PACKAGE_H_
#define PIPEPLAN_CLIENT_MODEL_PACKAGE_H_

#include <string>

#include "absl/status/statusor.h"
#include "pipeplan/v1/graph.pb.h"
#include "pipeplan/v1/model_package.pb.h"

namespace pipeplan::client {

// `dir`/manifest.json. NOT_FOUND when the file is missing, INVALID_ARGUMENT
// naming the file when it is not a pipeplan-model-package/1 manifest.
absl::StatusOr<v1::ModelPackageManifest> ReadModelPackage(const std::string& dir);

// `dir`/stages.json, same errors; also INVALID_ARGUMENT when the stages do
// not chain (stage s's outputs must be stage s+1's inputs).
absl::StatusOr<v1::StagesManifest> ReadStagesManifest(const std::string& dir);

// INVALID_ARGUMENT naming the first difference when the package's nodes are
// not exactly the graph's node ids in order (Plan.node_stage indexes both).
absl::Status CheckPackageMatchesGraph(const v1::ModelPackageManifest& package,
                                      const v1::ModelGraph& graph);

}  // namespace pipeplan::client

#endif  // PIPEPLAN_CLIENT_MODEL_PACKAGE_H_
