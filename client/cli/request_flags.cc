#include "request_flags.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/core/status_macros.h"

namespace pipeplan::cli {

const std::set<std::string>& PlanRequestFlagNames() {
  static const std::set<std::string>* names = new std::set<std::string>{
      "graph",           "cluster", "ranks", "microbatches",         "global-batch", "schedule",
      "chunks-per-rank", "method",  "comm",  "optimizer-multiplier", "time-limit",   "gap"};
  return *names;
}

const Flags::Aliases& DeprecatedPlanFlagNames() {
  static const Flags::Aliases* aliases =
      new Flags::Aliases{{"stages", "ranks"}, {"chunks", "chunks-per-rank"}};
  return *aliases;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
template <typename Message>
absl::Status ReadJsonFile(const std::string& path, Message* message) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  absl::Status s = ParseJson(text, message);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::PlanRequest> RequestFromFlags(const Flags& flags) {
  v1::PlanRequest req;
  PIPEPLAN_ASSIGN_OR_RETURN(std::string graph_path, flags.Require("graph"));
  PIPEPLAN_ASSIGN_OR_RETURN(std::string cluster_path, flags.Require("cluster"));
  PIPEPLAN_RETURN_IF_ERROR(ReadJsonFile(graph_path, req.mutable_graph()));
  PIPEPLAN_RETURN_IF_ERROR(ReadJsonFile(cluster_path, req.mutable_cluster()));
  v1::PlanOptions* o = req.mutable_options();
  PIPEPLAN_ASSIGN_OR_RETURN(int ranks, flags.GetInt("ranks", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(int microbatches, flags.GetInt("microbatches", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(int global_batch, flags.GetInt("global-batch", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(int chunks_per_rank, flags.GetInt("chunks-per-rank", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(double multiplier, flags.GetDouble("optimizer-multiplier", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(double time_limit, flags.GetDouble("time-limit", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(double gap, flags.GetDouble("gap", 0));
  o->set_num_ranks(ranks);
  o->set_microbatches(microbatches);
  o->set_global_batch(global_batch);
  o->set_chunks_per_rank(chunks_per_rank);
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
        v1::METHOD_AUTO,   v1::METHOD_DP,   v1::METHOD_MILP,    v1::METHOD_UNIFORM,
        v1::METHOD_PARAMS, v1::METHOD_TIME, v1::METHOD_IDEAL_DP};
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

}  // namespace pipeplan::cli
