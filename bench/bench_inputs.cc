#include "bench_inputs.h"

#include <cstdlib>
#include <iostream>
#include <utility>

#include "pipeplan/common/file_reader.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"

namespace pipeplan::bench {

Loaded Load(const std::string& graph_path, const std::string& cluster_path) {
  v1::PlanRequest req;
  for (const auto& [path, message] :
       {std::pair<std::string, google::protobuf::Message*>{graph_path, req.mutable_graph()},
        {cluster_path, req.mutable_cluster()}}) {
    absl::StatusOr<std::string> text = common::ReadFileToString(path, "bench input");
    absl::Status s = text.ok() ? ParseJson(*text, message) : text.status();
    if (!s.ok()) {
      std::cerr << path << ": " << s << "\n";
      std::exit(1);
    }
  }
  auto in = PlanInputs::FromRequest(req);
  if (!in.ok()) {
    std::cerr << in.status() << "\n";
    std::exit(1);
  }
  return {std::move(in->graph), std::move(in->cluster)};
}

}  // namespace pipeplan::bench
