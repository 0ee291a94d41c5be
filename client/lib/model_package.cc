#include "pipeplan/client/model_package.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace pipeplan::client {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Manifests may gain fields: unknown ones are ignored, not errors.
absl::Status ParseManifest(const std::string& path, google::protobuf::Message* message) {
  absl::StatusOr<std::string> text = ReadText(path);
  if (!text.ok()) return text.status();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(*text, message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        " is not valid JSON: ", std::string(status.message().data(), status.message().size())));
  }
  return absl::OkStatus();
}

bool SameTensors(const v1::TensorSpec& a, const v1::TensorSpec& b) {
  return a.name() == b.name() && a.dtype() == b.dtype() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end());
}

}  // namespace

absl::StatusOr<v1::ModelPackageManifest> ReadModelPackage(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  v1::ModelPackageManifest m;
  if (absl::Status s = ParseManifest(path, &m); !s.ok()) return s;
  if (m.format() != "pipeplan-model-package/1") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": format \"", m.format(), "\" is not pipeplan-model-package/1"));
  }
  if (m.nodes().empty() || m.inputs().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no nodes or no inputs"));
  }
  return m;
}

absl::StatusOr<v1::StagesManifest> ReadStagesManifest(const std::string& dir) {
  const std::string path = dir + "/stages.json";
  v1::StagesManifest m;
  if (absl::Status s = ParseManifest(path, &m); !s.ok()) return s;
  if (m.format() != "pipeplan-stages/1") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": format \"", m.format(), "\" is not pipeplan-stages/1"));
  }
  if (m.num_stages() < 1 || m.stages_size() != m.num_stages()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": num_stages ", m.num_stages(), " but ", m.stages_size(), " stages"));
  }
  for (int s = 0; s + 1 < m.stages_size(); ++s) {
    const v1::StageSpec& a = m.stages(s);
    const v1::StageSpec& b = m.stages(s + 1);
    bool chained = a.outputs_size() == b.inputs_size();
    for (int i = 0; chained && i < a.outputs_size(); ++i) {
      chained = SameTensors(a.outputs(i), b.inputs(i));
    }
    if (!chained) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": stages[", s, "].outputs differ from stages[", s + 1, "].inputs"));
    }
  }
  return m;
}

absl::Status CheckPackageMatchesGraph(const v1::ModelPackageManifest& package,
                                      const v1::ModelGraph& graph) {
  if (package.nodes_size() != graph.nodes_size()) {
    return absl::InvalidArgumentError(absl::StrCat("model package has ", package.nodes_size(),
                                                   " nodes but the graph has ", graph.nodes_size(),
                                                   ": export both from the same model"));
  }
  for (int i = 0; i < graph.nodes_size(); ++i) {
    if (package.nodes(i) != graph.nodes(i).id()) {
      return absl::InvalidArgumentError(absl::StrCat("model package nodes[", i, "] \"",
                                                     package.nodes(i), "\" is not graph.nodes[", i,
                                                     "].id \"", graph.nodes(i).id(), "\""));
    }
  }
  return absl::OkStatus();
}

}  // namespace pipeplan::client
