#include "pipeplan/worker/stage_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/core/status_macros.h"
#include "pipeplan/v1/graph.pb.h"

namespace pipeplan::worker {
namespace {

using schedule::ScheduleKind;

absl::StatusOr<ScheduleKind> KindFromProto(v1::Schedule s) {
  PIPEPLAN_ASSIGN_OR_RETURN(std::optional<ScheduleKind> kind, ScheduleFromProto(s));
  if (!kind) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan.schedule ", v1::Schedule_Name(s), " is not a runnable schedule"));
  }
  return *kind;
}

}  // namespace

int StagePlan::RankOf(std::string_view device_id) const {
  auto it = std::find(rank_devices.begin(), rank_devices.end(), device_id);
  return it == rank_devices.end() ? -1 : static_cast<int>(it - rank_devices.begin());
}

absl::StatusOr<StagePlan> StagePlanFromProto(const v1::Plan& plan, int64_t version,
                                             const v1::ModelGraph* graph) {
  StagePlan out;
  out.version = version;
  if (plan.stages_size() == 0) return absl::InvalidArgumentError("plan has no stages");
  PIPEPLAN_ASSIGN_OR_RETURN(out.kind, KindFromProto(plan.schedule()));
  out.num_stages = plan.stages_size();
  out.microbatches = plan.microbatches();
  out.chunks = plan.chunks_per_rank() > 0 ? plan.chunks_per_rank() : 2;
  for (const v1::Stage& s : plan.stages()) {
    if (std::find(out.rank_devices.begin(), out.rank_devices.end(), s.device_id()) ==
        out.rank_devices.end()) {
      out.rank_devices.push_back(s.device_id());
    }
    out.forward_seconds.push_back(s.forward_seconds());
    out.backward_seconds.push_back(s.backward_seconds());
    double factor = 1;
    for (const v1::DeviceFactor& f : plan.calibration().devices()) {
      if (f.device_id() == s.device_id() && f.time_factor() > 0 && std::isfinite(f.time_factor())) {
        factor = f.time_factor();
      }
    }
    out.time_factor.push_back(factor);
  }
  out.ranks = static_cast<int>(out.rank_devices.size());
  const int per_rank = schedule::StagesPerRank(out.kind, out.chunks);
  if (out.ranks * per_rank != out.num_stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan has ", out.num_stages, " stages on ", out.ranks, " devices, but ",
                     std::string(schedule::ScheduleKindName(out.kind)), " places ", per_rank,
                     " stages on each rank"));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(
      schedule::PipelineSchedule compute,
      schedule::BuildSchedule(out.kind, out.ranks, out.microbatches, out.chunks));
  PIPEPLAN_ASSIGN_OR_RETURN(out.lowered, schedule::InsertSendRecv(compute));

  if (graph != nullptr && graph->nodes_size() == plan.node_stage_size()) {
    const int n = graph->nodes_size();
    out.stage_nodes.assign(out.num_stages, {});
    absl::flat_hash_map<std::string, int> index;
    for (int i = 0; i < n; ++i) {
      index[graph->nodes(i).id()] = i;
      const int s = plan.node_stage(i);
      if (s < 0 || s >= out.num_stages) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan.node_stage[", i, "] = ", s, " is not a stage"));
      }
      out.stage_nodes[s].push_back(i);
    }
    out.boundary_bytes.assign(std::max(0, out.num_stages - 1), 0.0);
    for (const v1::Edge& e : graph->edges()) {
      auto src = index.find(e.src());
      auto dst = index.find(e.dst());
      if (src == index.end() || dst == index.end()) continue;
      const int a = plan.node_stage(src->second);
      const int b = plan.node_stage(dst->second);
      const double bytes = e.bytes() > 0 ? e.bytes() : graph->nodes(src->second).output_bytes();
      for (int boundary = a; boundary < b; ++boundary) out.boundary_bytes[boundary] += bytes;
    }
  }
  return out;
}

}  // namespace pipeplan::worker
