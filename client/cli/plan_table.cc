#include "plan_table.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/schedule/schedule_kind.h"

namespace pipeplan::cli {

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  // Two calls: absl checks a constexpr format only (clang refuses the other).
  return u == 0 ? absl::StrFormat("%.0f %s", bytes, units[u])
                : absl::StrFormat("%.2f %s", bytes, units[u]);
}

std::string HumanSeconds(double s) {
  if (s >= 1) return absl::StrFormat("%.3f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.3f ms", s * 1e3);
  return absl::StrFormat("%.3f us", s * 1e6);
}

std::string ScheduleDisplayName(v1::Schedule schedule) {
  absl::StatusOr<std::optional<schedule::ScheduleKind>> kind = ScheduleFromProto(schedule);
  if (!kind.ok()) return v1::Schedule_Name(schedule);
  if (!kind->has_value()) return "auto";
  return std::string(schedule::ScheduleKindName(**kind));
}

int PlanRanks(const v1::Plan& plan) {
  std::set<std::string> devices;
  for (const v1::Stage& s : plan.stages()) devices.insert(s.device_id());
  return static_cast<int>(devices.size());
}

int PlanReplicas(const v1::Plan& plan) { return std::max(1, plan.replicas_size()); }

namespace {

std::string StageRows(const v1::Plan& plan) {
  std::string out;
  absl::StrAppendFormat(&out, "%-5s %-10s %6s  %-28s %12s %12s %12s %22s\n", "stage", "device",
                        "nodes", "first .. last", "compute", "comm", "stage time",
                        "memory / capacity");
  for (const v1::Stage& s : plan.stages()) {
    std::string span = absl::StrCat(s.first_node(), " .. ", s.last_node());
    if (span.size() > 28) span = span.substr(0, 25) + "...";
    absl::StrAppendFormat(&out, "%-5d %-10s %6d  %-28s %12s %12s %12s %10s / %-10s%s%s\n",
                          s.index(), s.device_id(), s.num_nodes(), span,
                          HumanSeconds(s.forward_seconds() + s.backward_seconds()),
                          HumanSeconds(s.comm_seconds()), HumanSeconds(s.stage_seconds()),
                          HumanBytes(s.peak_memory_bytes()), HumanBytes(s.memory_capacity_bytes()),
                          s.recompute() ? "  recompute" : "",
                          s.stage_seconds() == plan.bottleneck_seconds() ? "  <- bottleneck" : "");
  }
  return out;
}

// With replicas: the devices of each, and what the all-reduce costs.
std::string ReplicaRows(const v1::Plan& plan) {
  if (plan.replicas_size() <= 1) return "";
  std::string out = absl::StrFormat("%d data-parallel replicas (placement: %s):\n",
                                    plan.replicas_size(), plan.placement());
  for (int q = 0; q < plan.replicas_size(); ++q) {
    absl::StrAppendFormat(&out, "  replica %-3d %s\n", q,
                          absl::StrJoin(plan.replicas(q).rank_device_ids(), " "));
  }
  std::map<std::string, double> per_rank;  // a rank's stages all-reduce one after another
  for (const v1::Stage& s : plan.stages()) per_rank[s.device_id()] += s.allreduce_seconds();
  double allreduce = 0;
  for (const auto& [device, seconds] : per_rank) allreduce = std::max(allreduce, seconds);
  absl::StrAppendFormat(&out,
                        "gradient all-reduce: up to %s per rank, %s of the step after the "
                        "slowest pipeline's last backward (the rest overlaps other ranks' "
                        "cool-down)\n",
                        HumanSeconds(allreduce), HumanSeconds(plan.allreduce_exposed_seconds()));
  return out;
}

std::string SolverRows(const v1::SolverReport& r) {
  std::string out;
  absl::StrAppendFormat(&out,
                        "solver %s: objective %s, lower bound %s, gap %.3f%%, %s, %d nodes "
                        "explored\n",
                        r.method(), HumanSeconds(r.objective()), HumanSeconds(r.lower_bound()),
                        100 * r.gap(), HumanSeconds(r.seconds()), r.nodes_explored());
  for (const v1::MethodResult& m : r.candidates()) {
    absl::StrAppendFormat(&out, "  %-9s %14s  %10s  %s\n", m.method(),
                          m.has_objective() ? HumanSeconds(m.objective()) : "-",
                          HumanSeconds(m.seconds()), m.note());
  }
  return out;
}

std::string AlternativeRow(const v1::Alternative& a) {
  return absl::StrFormat(
      "  %-26s ranks %-3d replicas %-3d microbatches %-4d step %-12s bubble %5.1f%%  "
      "peak memory %-10s%s\n",
      ScheduleDisplayName(a.schedule()), a.num_ranks(), std::max(1, a.num_replicas()),
      a.microbatches(), HumanSeconds(a.step_seconds()), 100 * a.bubble_ratio(),
      HumanBytes(a.peak_memory_bytes()),
      a.idle_devices() > 0 ? absl::StrCat("  ", a.idle_devices(), " idle") : "");
}

}  // namespace

std::string FormatPlanTable(const v1::Plan& plan) {
  std::string out = StageRows(plan);
  absl::StrAppendFormat(
      &out,
      "\nschedule %s, %d microbatches%s, %s communication\n"
      "predicted step %s, bubble ratio %.1f%%, bottleneck stage %s per "
      "microbatch\n",
      ScheduleDisplayName(plan.schedule()), plan.microbatches(),
      plan.chunks_per_rank() > 1 ? absl::StrCat(", ", plan.chunks_per_rank(), " stages per rank")
                                 : "",
      plan.comm_model() == v1::COMM_RELAY ? "relay" : "direct", HumanSeconds(plan.step_seconds()),
      100 * plan.bubble_ratio(), HumanSeconds(plan.bottleneck_seconds()));
  if (!plan.placement().empty()) {
    absl::StrAppendFormat(&out,
                          "placement %s; search gap %.1f%% (to a step's work spread perfectly "
                          "over the fastest devices)\n",
                          plan.placement(), 100 * plan.search_gap());
  }
  absl::StrAppend(&out, ReplicaRows(plan), SolverRows(plan.solver()));
  if (plan.alternatives_size() > 0) {
    absl::StrAppend(&out, "runners-up:\n");
    for (const v1::Alternative& a : plan.alternatives()) absl::StrAppend(&out, AlternativeRow(a));
  }
  return out;
}

std::string FormatShapeTable(const v1::Plan& plan, int global_batch) {
  // The planner lists shapes best first by the objective its search
  // minimizes; print them in that order with the objective itself.
  const bool per_step = global_batch > 0;
  std::string out = absl::StrCat(
      "best plan at each (ranks, replicas) scored, best first by the search's objective: ",
      per_step ? absl::StrCat("step time (global batch ", global_batch,
                              " fixed: every plan trains the same samples per step)\n")
               : "step time per microbatch and replica, step / (microbatches x replicas) "
                 "(no global batch: --microbatches is per replica)\n");
  for (const v1::Alternative& a : plan.shapes()) {
    const double units = std::max(1, a.microbatches()) * std::max(1, a.num_replicas());
    absl::StrAppend(&out, "  objective ",
                    HumanSeconds(per_step ? a.step_seconds() : a.step_seconds() / units),
                    AlternativeRow(a));
    if (!a.degenerate().empty()) {
      absl::StrAppend(&out, "    ranked last, degenerate: ", a.degenerate(),
                      " (kept only for when nothing else fits)\n");
    }
  }
  return out;
}

}  // namespace pipeplan::cli
