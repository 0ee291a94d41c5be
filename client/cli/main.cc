// `pipeplan`: plans pipeline-parallel training from the command line.
//
//   pipeplan plan --graph model.json --cluster cluster.json [--ranks P] ...
//   pipeplan --planner 127.0.0.1:7600 plan|jobs ...
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
#include "remote_commands.h"
#include "request_flags.h"
#include "simulate_command.h"

namespace pipeplan::cli {
namespace {

constexpr char kUsage[] = R"(usage: pipeplan <command> [flags]

commands:
  plan      split a model graph into pipeline stages and pick a schedule
            --graph FILE        model graph JSON (docs/graph-format.md)
            --cluster FILE      cluster topology JSON
            --ranks P           pipeline ranks (0 or absent: planner chooses);
                                --stages is a deprecated alias
            --microbatches M    (0 or absent: planner chooses)
            --global-batch B    samples per step (rescales per-microbatch costs)
            --schedule NAME     GPipe, 1F1B, Interleaved1F1B, LoopedBFS,
                                InterleavedZeroBubble, ZBVZeroBubble, DualPipeV, auto
            --chunks-per-rank V stages per rank for interleaved schedules (2);
                                --chunks is a deprecated alias
            --method M          auto, dp, ideal_dp, milp, uniform, params, time
            --comm MODEL        direct (default) or relay
            --optimizer-multiplier X  optimizer bytes per parameter byte (0)
            --time-limit S      solver time limit in seconds (10)
            --gap G             stop when the proven relative gap is below G
            --json              print the Plan as protobuf JSON
)";

absl::StatusOr<v1::Plan> PlanOffline(const v1::PlanRequest& req) {
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, PlanInputs::FromRequest(req));
  PIPEPLAN_ASSIGN_OR_RETURN(PlanResult result, MakePlan(*in.graph, *in.cluster, in.options));
  return PlanToProto(*in.graph, *in.cluster, result);
}

absl::Status RunPlan(const std::vector<std::string>& args) {
  PIPEPLAN_ASSIGN_OR_RETURN(
      Flags flags, Flags::Parse(args, PlanRequestFlagNames(), {"json"}, DeprecatedPlanFlagNames()));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest req, RequestFromFlags(flags));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Plan plan, PlanOffline(req));
  if (flags.Has("json")) {
    std::cout << ToJson(plan) << "\n";
  } else {
    std::cout << "graph " << req.graph().name() << ": " << req.graph().nodes_size() << " nodes, "
              << req.graph().edges_size() << " edges; cluster of " << req.cluster().devices_size()
              << " devices\n\n"
              << FormatPlanTable(plan);
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<GlobalFlags> global = ParseGlobalFlags(&args);
  if (!global.ok()) {
    std::cerr << "pipeplan: " << global.status().message() << "\n";
    return 2;
  }
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage << kSimulateUsage << kRemoteUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  absl::Status status;
  if (command == "plan" && !global->planner.empty()) {
    status = RunRemotePlan(*global, args);
  } else if (command == "plan") {
    status = RunPlan(args);
  } else if (command == "simulate") {
    status = RunSimulate(args, [](const Flags& flags) -> absl::StatusOr<v1::Plan> {
      PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest req, RequestFromFlags(flags));
      return PlanOffline(req);
    });
  } else if (command == "jobs") {
    status = RunJobs(*global, args);
  } else {
    std::cerr << "pipeplan: unknown command \"" << command << "\"\n"
              << kUsage << kSimulateUsage << kRemoteUsage;
    return 2;
  }
  if (!status.ok()) {
    std::cerr << "pipeplan: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
              << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace pipeplan::cli

int main(int argc, char** argv) { return pipeplan::cli::Main(argc, argv); }
