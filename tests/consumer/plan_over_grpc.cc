// Plans one request over gRPC with pipeplan::client and in-process with
// pipeplan::convert + pipeplan::core, and checks both give the same plan:
// what a training job linking the client library does.
//
//   plan_over_grpc GRAPH.json CLUSTER.json HOST:PORT
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "pipeplan/client/planner_client.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"

namespace {

std::string Read(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: plan_over_grpc GRAPH CLUSTER HOST:PORT\n");
    return 2;
  }
  pipeplan::v1::PlanRequest request;
  if (auto s = pipeplan::ParseJson(Read(argv[1]), request.mutable_graph()); !s.ok()) {
    return Fail("graph", s);
  }
  if (auto s = pipeplan::ParseJson(Read(argv[2]), request.mutable_cluster()); !s.ok()) {
    return Fail("cluster", s);
  }
  request.mutable_options()->set_num_ranks(2);
  request.mutable_options()->set_microbatches(4);
  request.mutable_options()->set_schedule(pipeplan::v1::SCHEDULE_1F1B);
  request.mutable_options()->set_method(pipeplan::v1::METHOD_DP);  // exact: one answer

  auto client = pipeplan::client::PlannerClient::Connect({.address = argv[3]});
  if (!client.ok()) return Fail("connect", client.status());
  absl::StatusOr<pipeplan::v1::Plan> remote = (*client)->Plan(request);
  if (!remote.ok()) return Fail("Plan RPC", remote.status());

  auto inputs = pipeplan::PlanInputs::FromRequest(request);
  if (!inputs.ok()) return Fail("PlanInputs", inputs.status());
  auto local = pipeplan::MakePlan(*inputs->graph, *inputs->cluster, inputs->options);
  if (!local.ok()) return Fail("MakePlan", local.status());
  const pipeplan::v1::Plan in_process =
      pipeplan::PlanToProto(*inputs->graph, *inputs->cluster, *local);
  std::printf("over gRPC: %d stages, step %.9g s; in-process: step %.9g s\n", remote->stages_size(),
              remote->step_seconds(), in_process.step_seconds());
  const bool same = remote->step_seconds() == in_process.step_seconds() &&
                    remote->node_stage_size() == in_process.node_stage_size() &&
                    std::equal(remote->node_stage().begin(), remote->node_stage().end(),
                               in_process.node_stage().begin());
  if (!same) std::fprintf(stderr, "the planner and the core disagree\n");
  return same && remote->stages_size() == 2 ? 0 : 1;
}
