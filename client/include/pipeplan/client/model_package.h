// The model package and compiled-stage manifests (docs/model-package.md) as
// plain C++ values.
//
// The torch executor's translation units see LibTorch's include path, which
// for a CUDA wheel carries an old protobuf; they must never include a
// generated .pb.h. So the JSON is parsed here, in a torch-free TU, and only
// these structs cross over. Readers validate what the executor relies on and
// name the file and field that is wrong (INVALID_ARGUMENT), NOT_FOUND when a
// file is missing.
#ifndef PIPEPLAN_CLIENT_MODEL_PACKAGE_H_
#define PIPEPLAN_CLIENT_MODEL_PACKAGE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pipeplan {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // float32 float64 float16 bfloat16 int64 int32 int16 int8 uint8 bool
  int64_t high = 0;   // integer model inputs: synthetic values in [0, high)
  bool requires_grad = false;
};

// manifest.json of a model package directory.
struct ModelPackage {
  std::string dir;
  std::string graph_name;
  std::string digest;
  std::vector<std::string> nodes;
  std::vector<TensorSpec> inputs;
  TensorSpec output;
  int64_t batch_dim = 0;
  std::vector<TensorSpec> parameters;
  std::string loss;

  std::string ParamsPath() const { return dir + "/params.pt"; }
};

struct StageParameter {
  std::string name;  // canonical, as in ModelPackage::parameters
  std::string path;  // in the scripted stage module, e.g. "h.0.attn.weight"
};

struct CompiledStage {
  int index = 0;
  std::string file;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<StageParameter> parameters;
};

// stages.json of a compiled-stage directory.
struct CompiledStages {
  std::string dir;
  std::string package_digest;
  std::string assignment_digest;
  int64_t microbatch_size = 0;
  std::vector<CompiledStage> stages;

  int num_stages() const { return static_cast<int>(stages.size()); }
  std::string StagePath(int s) const { return dir + "/" + stages[s].file; }
};

// Bytes of one element; 0 for an unknown dtype name.
int64_t DTypeSize(const std::string& dtype);
bool IsFloatingDType(const std::string& dtype);
int64_t NumElements(const TensorSpec& spec);

// Bytes of a boundary buffer: every tensor (gradients: only the
// requires_grad ones), concatenated in manifest order.
int64_t BoundaryBytes(const std::vector<TensorSpec>& tensors, bool gradients);

absl::StatusOr<ModelPackage> ReadModelPackage(const std::string& dir);
// Also checks that stage s's outputs are stage s+1's inputs.
absl::StatusOr<CompiledStages> ReadCompiledStages(const std::string& dir);
// The same from the files' text (`dir` as the directory they came from), for
// fuzzing and for callers that already hold the text.
absl::StatusOr<ModelPackage> ModelPackageFromJson(const std::string& json, const std::string& dir);
absl::StatusOr<CompiledStages> CompiledStagesFromJson(const std::string& json,
                                                      const std::string& dir);

// INVALID_ARGUMENT unless `graph_nodes` (the job graph's node ids, in order)
// are the package's nodes: a package exported from another model. `jobs
// create` checks this before the job exists.
absl::Status CheckPackageMatchesGraph(const ModelPackage& package,
                                      const std::vector<std::string>& graph_nodes);
// CheckPackageMatchesGraph, and `node_stage` gives each node a stage: else
// a plan for another graph.
absl::Status CheckPackageFitsPlan(const ModelPackage& package,
                                  const std::vector<std::string>& graph_nodes,
                                  const std::vector<int>& node_stage);

// Canonical parameter name -> the ranks holding it, ascending (a tied
// parameter used by stages on two ranks has two). REQUIRES:
// stage_to_rank.size() == stages.num_stages().
using ParameterOwners = std::map<std::string, std::vector<int>>;
ParameterOwners OwnersOf(const CompiledStages& stages, const std::vector<int>& stage_to_rank);

}  // namespace pipeplan

#endif  // PIPEPLAN_CLIENT_MODEL_PACKAGE_H_
