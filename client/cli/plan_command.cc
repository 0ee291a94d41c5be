#include "plan_command.h"

#include <unistd.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "command.h"
#include "output_file.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/graph.h"
#include "pipeplan/core/planner.h"
#include "plan_svg.h"
#include "plan_table.h"
#include "progress/search_progress_line.h"
#include "request_flags.h"

namespace pipeplan::cli {

absl::StatusOr<v1::Plan> PlanOffline(const v1::PlanRequest& req) {
  PIPEPLAN_ASSIGN_OR_RETURN(PlanInputs in, PlanInputs::FromRequest(req));
  // A long search (thousands of devices) shows where it stands on stderr.
  SearchProgressLine line(std::cerr, isatty(STDERR_FILENO) != 0);
  in.options.progress = [&line](const SearchProgress& p) { line.Update(p); };
  absl::StatusOr<PlanResult> result = MakePlan(*in.graph, *in.cluster, in.options);
  line.Finish();
  if (!result.ok()) return result.status();
  return PlanToProto(*in.graph, *in.cluster, *result);
}

absl::StatusOr<v1::Plan> PlanAnywhere(const GlobalFlags& global, const v1::PlanRequest& req) {
  if (global.planner.empty()) return PlanOffline(req);
  PIPEPLAN_ASSIGN_OR_RETURN(auto client, Connect(global));
  return client->Plan(req);
}

namespace {

// --svg FILE: the stages over the model's nodes (plan_svg.h).
absl::Status WritePlanSvg(const std::string& path, const v1::PlanRequest& req,
                          const v1::Plan& plan) {
  PIPEPLAN_ASSIGN_OR_RETURN(Graph graph, Graph::Build(GraphSpecFromProto(req.graph())));
  PIPEPLAN_ASSIGN_OR_RETURN(std::string svg, PlanSvg(graph, plan));
  return WriteOutputFile(path, svg, "SVG");
}

absl::Status RunPlan(const CommandContext& ctx) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest req, RequestFromFlags(ctx.flags));
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Plan plan, PlanAnywhere(ctx.global, req));
  if (auto path = ctx.flags.Get("svg")) PIPEPLAN_RETURN_IF_ERROR(WritePlanSvg(*path, req, plan));
  if (ctx.global.output == Output::kJson) {
    std::cout << ToJson(plan) << "\n";
    return absl::OkStatus();
  }
  std::cout << "graph " << req.graph().name() << ": " << req.graph().nodes_size() << " nodes, "
            << req.graph().edges_size() << " edges; cluster of " << req.cluster().devices_size()
            << " devices"
            << (ctx.global.planner.empty() ? ""
                                           : absl::StrCat(" (planned by ", ctx.global.planner, ")"))
            << "\n\n"
            << FormatPlanTable(plan);
  if (ctx.flags.Has("explain")) {
    // The search ranks by step time only when the batch is fixed in samples.
    const bool fixed = req.options().global_batch() > 0 && req.graph().batch_size() > 0;
    std::cout << "\n" << FormatShapeTable(plan, fixed ? req.options().global_batch() : 0);
  }
  return absl::OkStatus();
}

}  // namespace

Command PlanCommand() {
  Command c = MakeCommand("plan", "split a model graph into pipeline stages and pick a schedule",
                          "Without --planner the planning core runs in this process; with it, the\n"
                          "planner solves the same request. -o json prints the pipeplan.v1.Plan.\n",
                          RunPlan);
  c.flags.Include(PlanInputFlags()).Include(PlanOptionFlags());
  c.flags.Switch("explain", "also print the best plan of every (ranks, replicas) scored")
      .Value("svg", "FILE",
             "draw the stages over the model's nodes, with each stage's time and memory, as an\n"
             "SVG picture");
  return c;
}

}  // namespace pipeplan::cli
