#include "pipeplan/client/model_package.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "pipeplan/common/file_reader.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/v1/model_package.pb.h"

namespace pipeplan {
namespace {

// `text` as `Message`; errors name `path`.
template <typename Message>
absl::StatusOr<Message> ParseJson(const std::string& text, const std::string& path) {
  Message message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // newer writers may add fields
  auto status = google::protobuf::util::JsonStringToMessage(text, &message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON for ",
                                                   Message::descriptor()->name(), ": ",
                                                   std::string(status.message())));
  }
  return message;
}

constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;

absl::StatusOr<TensorSpec> FromProto(const v1::TensorSpec& t, const std::string& where) {
  TensorSpec spec;
  spec.name = t.name();
  spec.shape.assign(t.shape().begin(), t.shape().end());
  spec.dtype = t.dtype();
  spec.high = t.high();
  spec.requires_grad = t.requires_grad();
  if (DTypeSize(spec.dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " \"", spec.name, "\" has unknown dtype \"", spec.dtype, "\""));
  }
  if (spec.requires_grad && !IsFloatingDType(spec.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " \"", spec.name, "\" requires a gradient but is ", spec.dtype));
  }
  // NumElements and BoundaryBytes multiply and add these in int64: a
  // tensor over 1 TiB is refused here (no real one is), so neither can
  // overflow.
  int64_t bytes = DTypeSize(spec.dtype);
  for (int64_t d : spec.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " \"", spec.name, "\" has a negative dimension"));
    }
    if (d > 0 && bytes > kMaxTensorBytes / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " \"", spec.name, "\" is larger than ", kMaxTensorBytes, " bytes"));
    }
    bytes *= d;
  }
  return spec;
}

template <typename Repeated>
absl::StatusOr<std::vector<TensorSpec>> FromProto(const Repeated& specs, const std::string& where) {
  std::vector<TensorSpec> out;
  for (int i = 0; i < specs.size(); ++i) {
    PIPEPLAN_ASSIGN_OR_RETURN(TensorSpec t, FromProto(specs[i], absl::StrCat(where, "[", i, "]")));
    out.push_back(std::move(t));
  }
  return out;
}

std::string Describe(const std::vector<TensorSpec>& tensors) {
  return absl::StrJoin(tensors, ", ", [](std::string* out, const TensorSpec& t) {
    absl::StrAppend(out, t.name, " ", t.dtype, "[", absl::StrJoin(t.shape, ","), "]");
  });
}

bool SameSpecs(const std::vector<TensorSpec>& a, const std::vector<TensorSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].shape != b[i].shape || a[i].dtype != b[i].dtype ||
        a[i].requires_grad != b[i].requires_grad) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<CompiledStage> StageFromProto(const v1::CompiledStage& p, int s,
                                             const std::string& path) {
  const std::string where = absl::StrCat(path, ": stages[", s, "]");
  if (p.index() != s) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has index ", p.index()));
  }
  if (p.file().empty() || p.file().find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".file must be a file name in the directory, got \"", p.file(), "\""));
  }
  CompiledStage stage;
  stage.index = s;
  stage.file = p.file();
  PIPEPLAN_ASSIGN_OR_RETURN(stage.inputs, FromProto(p.inputs(), where + ".inputs"));
  PIPEPLAN_ASSIGN_OR_RETURN(stage.outputs, FromProto(p.outputs(), where + ".outputs"));
  for (const v1::StageParameter& q : p.parameters()) {
    if (q.name().empty() || q.path().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".parameters needs name and path"));
    }
    stage.parameters.push_back({q.name(), q.path()});
  }
  return stage;
}

}  // namespace

int64_t DTypeSize(const std::string& dtype) {
  static const std::map<std::string, int64_t> kSizes = {
      {"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2}, {"int64", 8},
      {"int32", 4},   {"int16", 2},   {"int8", 1},    {"uint8", 1},    {"bool", 1}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

bool IsFloatingDType(const std::string& dtype) {
  return dtype == "float32" || dtype == "float64" || dtype == "float16" || dtype == "bfloat16";
}

int64_t NumElements(const TensorSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  return n;
}

int64_t BoundaryBytes(const std::vector<TensorSpec>& tensors, bool gradients) {
  int64_t bytes = 0;
  for (const TensorSpec& t : tensors) {
    if (!gradients || t.requires_grad) bytes += NumElements(t) * DTypeSize(t.dtype);
  }
  return bytes;
}

absl::StatusOr<ModelPackage> ReadModelPackage(const std::string& dir) {
  PIPEPLAN_ASSIGN_OR_RETURN(
      std::string text, common::ReadFileToString(dir + "/manifest.json", "model package manifest"));
  return ModelPackageFromJson(text, dir);
}

absl::StatusOr<ModelPackage> ModelPackageFromJson(const std::string& json, const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  PIPEPLAN_ASSIGN_OR_RETURN(v1::ModelPackageManifest m,
                            ParseJson<v1::ModelPackageManifest>(json, path));
  if (m.format() != "pipeplan-model-package/1") {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": format is \"", m.format(), "\", this worker reads pipeplan-model-package/1"));
  }
  ModelPackage p;
  p.dir = dir;
  p.graph_name = m.graph_name();
  p.digest = m.digest();
  p.nodes.assign(m.nodes().begin(), m.nodes().end());
  PIPEPLAN_ASSIGN_OR_RETURN(p.inputs, FromProto(m.inputs(), path + ": inputs"));
  PIPEPLAN_ASSIGN_OR_RETURN(p.output, FromProto(m.output(), path + ": output"));
  PIPEPLAN_ASSIGN_OR_RETURN(p.parameters, FromProto(m.parameters(), path + ": parameters"));
  p.batch_dim = m.batch_dim();
  p.loss = m.loss();
  if (p.inputs.empty()) return absl::InvalidArgumentError(path + ": the model has no inputs");
  for (const TensorSpec& in : p.inputs) {
    if (p.batch_dim < 0 || p.batch_dim >= static_cast<int64_t>(in.shape.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": batch_dim ", p.batch_dim, " is not a dimension of input \"", in.name, "\""));
    }
  }
  return p;
}

absl::StatusOr<CompiledStages> ReadCompiledStages(const std::string& dir) {
  PIPEPLAN_ASSIGN_OR_RETURN(
      std::string text, common::ReadFileToString(dir + "/stages.json", "compiled stages manifest"));
  return CompiledStagesFromJson(text, dir);
}

absl::StatusOr<CompiledStages> CompiledStagesFromJson(const std::string& json,
                                                      const std::string& dir) {
  const std::string path = dir + "/stages.json";
  PIPEPLAN_ASSIGN_OR_RETURN(v1::StagesManifest m, ParseJson<v1::StagesManifest>(json, path));
  if (m.format() != "pipeplan-stages/1") {
    return absl::InvalidArgumentError(absl::StrCat(path, ": format is \"", m.format(),
                                                   "\", this worker reads pipeplan-stages/1"));
  }
  if (m.num_stages() < 1 || m.num_stages() != m.stages_size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": num_stages is ", m.num_stages(),
                                                   " but ", m.stages_size(), " stages are listed"));
  }
  if (m.microbatch_size() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": microbatch_size must be >= 1"));
  }
  CompiledStages out;
  out.dir = dir;
  out.package_digest = m.package_digest();
  out.assignment_digest = m.assignment_digest();
  out.microbatch_size = m.microbatch_size();
  for (int s = 0; s < m.stages_size(); ++s) {
    PIPEPLAN_ASSIGN_OR_RETURN(CompiledStage stage, StageFromProto(m.stages(s), s, path));
    out.stages.push_back(std::move(stage));
  }
  for (int s = 0; s + 1 < out.num_stages(); ++s) {
    if (!SameSpecs(out.stages[s].outputs, out.stages[s + 1].inputs)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": stage ", s, " outputs (", Describe(out.stages[s].outputs),
          ") differ from stage ", s + 1, " inputs (", Describe(out.stages[s + 1].inputs), ")"));
    }
  }
  return out;
}

absl::Status CheckPackageMatchesGraph(const ModelPackage& package,
                                      const std::vector<std::string>& graph_nodes) {
  const std::string where = absl::StrCat("model package ", package.dir);
  if (graph_nodes.size() != package.nodes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has ", package.nodes.size(),
                                                   " nodes, the job's graph ", graph_nodes.size()));
  }
  for (size_t i = 0; i < graph_nodes.size(); ++i) {
    if (graph_nodes[i] != package.nodes[i]) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": node ", i, " is \"",
                                                     package.nodes[i], "\", the job's graph has \"",
                                                     graph_nodes[i], "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPackageFitsPlan(const ModelPackage& package,
                                  const std::vector<std::string>& graph_nodes,
                                  const std::vector<int>& node_stage) {
  if (absl::Status s = CheckPackageMatchesGraph(package, graph_nodes); !s.ok()) return s;
  const std::string where = absl::StrCat("model package ", package.dir);
  if (node_stage.size() != package.nodes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan places ", node_stage.size(), " nodes, ", where, " has ", package.nodes.size()));
  }
  return absl::OkStatus();
}

ParameterOwners OwnersOf(const CompiledStages& stages, const std::vector<int>& stage_to_rank) {
  ParameterOwners owners;
  for (const CompiledStage& stage : stages.stages) {
    for (const StageParameter& p : stage.parameters) {
      std::vector<int>& ranks = owners[p.name];
      const int r = stage_to_rank[stage.index];
      if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
    }
  }
  for (auto& [name, ranks] : owners) std::sort(ranks.begin(), ranks.end());
  return owners;
}

}  // namespace pipeplan
