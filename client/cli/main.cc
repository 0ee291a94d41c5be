// `pipeplan`: plans pipeline-parallel training from the command line.
//
//   pipeplan plan --graph model.json --cluster cluster.json [--stages K] ...
//
// Offline (no --planner) the CLI runs the planning core in-process, the same
// library the planner service uses.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "flags.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/core/status_macros.h"
#include "plan_table.h"

namespace pipeplan::cli {
namespace {

constexpr char kUsage[] = R"(usage: pipeplan <command> [flags]

commands:
  plan      split a model graph into pipeline stages and pick a schedule
            --graph FILE        model graph JSON (docs/graph-format.md)
            --cluster FILE      cluster topology JSON
            --stages K          pipeline ranks (0 or absent: planner chooses)
            --microbatches M    (0 or absent: planner chooses)
            --global-batch B    samples per step (rescales per-microbatch costs)
            --schedule NAME     GPipe, 1F1B, Interleaved1F1B, LoopedBFS,
                                InterleavedZeroBubble, ZBVZeroBubble, DualPipeV, auto
            --chunks V          stages per rank for interleaved schedules (2)
            --method M          auto, dp, ideal_dp, milp, uniform, params, time
            --comm MODEL        direct (default) or relay
            --optimizer-multiplier X  optimizer bytes per parameter byte (0)
            --time-limit S      solver time limit in seconds (10)
            --gap G             stop when the proven relative gap is below G
            --json              print the Plan as protobuf JSON
)";

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename Message>
absl::Status ReadJsonFile(const std::string& path, Message* message) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  absl::Status s = ParseJson(text, message);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return absl::OkStatus();
}

absl::StatusOr<v1::PlanRequest> RequestFromFlags(const Flags& flags) {
  v1::PlanRequest req;
  PIPEPLAN_ASSIGN_OR_RETURN(std::string graph_path, flags.Require("graph"));
  PIPEPLAN_ASSIGN_OR_RETURN(std::string cluster_path, flags.Require("cluster"));
  PIPEPLAN_RETURN_IF_ERROR(ReadJsonFile(graph_path, req.mutable_graph()));
  PIPEPLAN_RETURN_IF_ERROR(ReadJsonFile(cluster_path, req.mutable_cluster()));
  v1::PlanOptions* o = req.mutable_options();
  PIPEPLAN_ASSIGN_OR_RETURN(int stages, flags.GetInt("stages", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(int microbatches, flags.GetInt("microbatches", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(int global_batch, flags.GetInt("global-batch", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(int chunks, flags.GetInt("chunks", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(double multiplier, flags.GetDouble("optimizer-multiplier", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(double time_limit, flags.GetDouble("time-limit", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(double gap, flags.GetDouble("gap", 0));
  o->set_num_stages(stages);
  o->set_microbatches(microbatches);
  o->set_global_batch(global_batch);
  o->set_chunks_per_rank(chunks);
  o->set_optimizer_state_multiplier(multiplier);
  o->set_time_limit_seconds(time_limit);
  o->set_relative_gap(gap);
  if (auto name = flags.Get("schedule"); name && absl::AsciiStrToLower(*name) != "auto") {
    PIPEPLAN_ASSIGN_OR_RETURN(auto kind, schedule::ParseScheduleKind(*name));
    o->set_schedule(ScheduleToProto(kind));
  }
  if (auto name = flags.Get("method")) {
    PIPEPLAN_ASSIGN_OR_RETURN(PartitionMethod m, ParsePartitionMethod(*name));
    static constexpr v1::PartitionMethod kWire[] = {
        v1::METHOD_AUTO,    v1::METHOD_DP,     v1::METHOD_MILP,    v1::METHOD_UNIFORM,
        v1::METHOD_PARAMS,  v1::METHOD_TIME,   v1::METHOD_IDEAL_DP};
    o->set_method(kWire[static_cast<int>(m)]);
  }
  if (auto comm = flags.Get("comm")) {
    const std::string c = absl::AsciiStrToLower(*comm);
    if (c == "relay") {
      o->set_comm_model(v1::COMM_RELAY);
    } else if (c != "direct") {
      return absl::InvalidArgumentError(
          absl::StrCat("--comm must be direct or relay, got \"", *comm, "\""));
    }
  }
  return req;
}

absl::StatusOr<v1::Plan> PlanOffline(const v1::PlanRequest& req) {
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, PlanInputs::FromRequest(req));
  PIPEPLAN_ASSIGN_OR_RETURN(PlanResult result, MakePlan(*in.graph, *in.cluster, in.options));
  return PlanToProto(*in.graph, *in.cluster, result);
}

absl::Status RunPlan(const std::vector<std::string>& args) {
  PIPEPLAN_ASSIGN_OR_RETURN(
      Flags flags,
      Flags::Parse(args,
                   {"graph", "cluster", "stages", "microbatches", "global-batch", "schedule",
                    "chunks", "method", "comm", "optimizer-multiplier", "time-limit", "gap"},
                   {"json"}));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest req, RequestFromFlags(flags));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Plan plan, PlanOffline(req));
  if (flags.Has("json")) {
    std::cout << ToJson(plan) << "\n";
  } else {
    std::cout << "graph " << req.graph().name() << ": " << req.graph().nodes_size() << " nodes, "
              << req.graph().edges_size() << " edges; cluster of "
              << req.cluster().devices_size() << " devices\n\n"
              << FormatPlanTable(plan);
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  absl::Status status;
  if (command == "plan") {
    status = RunPlan(args);
  } else {
    std::cerr << "pipeplan: unknown command \"" << command << "\"\n" << kUsage;
    return 2;
  }
  if (!status.ok()) {
    std::cerr << "pipeplan: " << absl::StatusCodeToString(status.code()) << ": "
              << status.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace pipeplan::cli

int main(int argc, char** argv) { return pipeplan::cli::Main(argc, argv); }
