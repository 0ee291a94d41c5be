#include "pipeplan/core/schedule/simulator.h"

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine.h"
#include "structure.h"

namespace pipeplan::schedule {

absl::StatusOr<SimulationResult> Simulate(const PipelineSchedule& schedule, const StageCosts& costs,
                                          const SimulateOptions& options) {
  // Fast path: one fused pass for a valid schedule. Anything unusual (a
  // timeline request, or host time charged to messages) takes the checked path below, which reports
  // errors in the documented order: structure, then costs, then deadlocks.
  if (!options.record_timeline && costs.send_host.empty() && costs.recv_host.empty() &&
      internal::CheckHeader(schedule).ok() && CheckStageCosts(costs, schedule.num_stages).ok()) {
    SimulationResult fast;
    if (internal::SimulateFast(schedule, costs, fast)) return fast;
  }
  return internal::SimulateChecked(schedule, costs, options);
}

namespace internal {

void CountMemory(const PipelineSchedule& s, const StageCosts& costs, SimulationResult& out) {
  out.peak_inflight_microbatches.assign(s.num_ranks, 0);
  out.peak_inflight_per_stage.assign(s.num_stages, 0);
  out.peak_memory_bytes.assign(s.num_ranks, 0);
  std::vector<int> stage_inflight(s.num_stages, 0);
  std::vector<double> params(s.num_ranks, 0);
  if (!costs.param_bytes.empty()) {
    for (int st = 0; st < s.num_stages; ++st) params[s.stage_to_rank[st]] += costs.param_bytes[st];
  }
  auto act = [&](int stage) {
    return costs.activation_bytes.empty() ? 0.0 : costs.activation_bytes[stage];
  };
  for (int r = 0; r < s.num_ranks; ++r) {
    int inflight = 0;
    double bytes = 0;
    int peak = 0;
    double peak_bytes = 0;
    auto apply = [&](const Action& a) {
      if (a.type == ActionType::kForward) {
        ++inflight;
        bytes += act(a.stage);
        int& per_stage = stage_inflight[a.stage];
        out.peak_inflight_per_stage[a.stage] =
            std::max(out.peak_inflight_per_stage[a.stage], ++per_stage);
        peak = std::max(peak, inflight);
        peak_bytes = std::max(peak_bytes, bytes);
      } else if (a.type == ActionType::kBackwardInput || a.type == ActionType::kFullBackward) {
        --inflight;
        bytes -= act(a.stage);
        --stage_inflight[a.stage];
      }
    };
    for (const std::optional<Action>& slot : s.programs[r]) {
      if (slot) ForEachHalf(*slot, apply);
    }
    out.peak_inflight_microbatches[r] = peak;
    out.peak_memory_bytes[r] = params[r] + peak_bytes;
  }
}

absl::StatusOr<SimulationResult> SimulateChecked(const PipelineSchedule& schedule,
                                                 const StageCosts& costs,
                                                 const SimulateOptions& options) {
  bool comms = false;
  if (absl::Status st = internal::CheckStructure(schedule, &comms); !st.ok()) return st;
  if (absl::Status st = CheckStageCosts(costs, schedule.num_stages); !st.ok()) return st;
  absl::StatusOr<internal::EngineRun> run =
      internal::Execute(schedule, comms, &costs, options.record_timeline);
  if (!run.ok()) return run.status();
  return ResultOf(schedule, costs, *std::move(run));
}

SimulationResult ResultOf(const PipelineSchedule& schedule, const StageCosts& costs,
                          EngineRun run) {
  SimulationResult out;
  out.step_seconds = run.makespan;
  out.busy_seconds = std::move(run.busy_seconds);
  out.finish_seconds = std::move(run.finish_seconds);
  out.end_work_finish_seconds = std::move(run.end_work_finish_seconds);
  out.idle_seconds.resize(schedule.num_ranks);
  double idle = 0;
  for (int r = 0; r < schedule.num_ranks; ++r) {
    out.idle_seconds[r] = out.step_seconds - out.busy_seconds[r];
    idle += out.idle_seconds[r];
  }
  out.bubble_ratio = out.step_seconds > 0 ? idle / (schedule.num_ranks * out.step_seconds) : 0;
  CountMemory(schedule, costs, out);
  out.timeline = std::move(run.timeline);
  return out;
}

}  // namespace internal

std::string FormatTimeline(const SimulationResult& result, int num_ranks) {
  std::vector<const TimelineEvent*> events;
  events.reserve(result.timeline.size());
  for (const TimelineEvent& e : result.timeline) events.push_back(&e);
  std::stable_sort(events.begin(), events.end(), [](const auto* a, const auto* b) {
    return std::tie(a->start, a->rank, a->step) < std::tie(b->start, b->rank, b->step);
  });
  std::vector<std::pair<double, std::vector<std::string>>> rows;
  for (const TimelineEvent* e : events) {
    if (rows.empty() || rows.back().first != e->start) {
      rows.emplace_back(e->start, std::vector<std::string>(num_ranks));
    }
    std::string& cell = rows.back().second[e->rank];
    absl::StrAppend(&cell, cell.empty() ? "" : "+", ActionToString(e->action));
  }
  std::vector<size_t> width(num_ranks, 1);
  for (const auto& row : rows) {
    for (int r = 0; r < num_ranks; ++r) width[r] = std::max(width[r], row.second[r].size());
  }
  const int digits = static_cast<int>(std::to_string(rows.empty() ? 0 : rows.size() - 1).size());
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::StrAppendFormat(&out, "Step %0*d [t=%.6f]:", std::max(digits, 2), i, rows[i].first);
    for (int r = 0; r < num_ranks; ++r) {
      const std::string& cell = rows[i].second[r];
      absl::StrAppendFormat(&out, " %-*s", width[r], cell.empty() ? "-" : cell);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out.push_back('\n');
  }
  return out;
}

}  // namespace pipeplan::schedule
