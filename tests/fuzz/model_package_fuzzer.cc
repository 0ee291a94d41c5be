// Fuzzes the worker's readers of a model package (manifest.json) and of
// compiled stages (stages.json), and what the torch executor computes from
// them before any tensor exists: element counts and boundary buffer sizes,
// the package-vs-graph and package-vs-plan checks, parameter owners. The
// files come from the user's exporter run, so a malformed one must give
// INVALID_ARGUMENT naming the field, never a crash or an overflow.
//
// Input: first byte even: manifest.json text; odd: stages.json text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pipeplan/client/model_package.h"

namespace pipeplan {
namespace {

void Package(const std::string& json) {
  absl::StatusOr<ModelPackage> p = ModelPackageFromJson(json, "/fuzz");
  if (!p.ok()) return;
  (void)BoundaryBytes(p->inputs, false);
  (void)BoundaryBytes(p->parameters, true);
  (void)NumElements(p->output);
  std::vector<int> node_stage(p->nodes.size(), 0);
  (void)CheckPackageFitsPlan(*p, p->nodes, node_stage);
  (void)CheckPackageMatchesGraph(*p, {"n0"});
}

void Stages(const std::string& json) {
  absl::StatusOr<CompiledStages> s = CompiledStagesFromJson(json, "/fuzz");
  if (!s.ok()) return;
  std::vector<int> stage_to_rank;
  for (int i = 0; i < s->num_stages(); ++i) {
    (void)BoundaryBytes(s->stages[i].inputs, true);
    (void)BoundaryBytes(s->stages[i].outputs, false);
    (void)s->StagePath(i);
    stage_to_rank.push_back(i % 2);
  }
  (void)OwnersOf(*s, stage_to_rank);
}

}  // namespace
}  // namespace pipeplan

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string json(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    pipeplan::Package(json);
  } else {
    pipeplan::Stages(json);
  }
  return 0;
}
