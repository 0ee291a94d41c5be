#include "simulate_command.h"

#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "command.h"
#include "json_text.h"
#include "output_file.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/file_reader.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/chrome_trace.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/core/schedule/action.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/csv.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"
#include "pipeplan/core/schedule/unit_time.h"
#include "pipeplan/core/step_spread.h"
#include "plan_command.h"
#include "plan_table.h"
#include "request_flags.h"
#include "timeline_svg.h"

namespace pipeplan::cli {

namespace {

using schedule::PipelineSchedule;
using schedule::ScheduleKind;
using schedule::StageCosts;

}  // namespace

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  // One writer, so a missing folder is NOT_FOUND here as for --svg (it was
  // PERMISSION_DENIED for any failure).
  return WriteOutputFile(path, text, "output file");
}

namespace {

// Lowers a compute-only schedule whose stages span ranks, so that the
// timeline (and any saved CSV) shows the SEND/RECV PyTorch would issue.
absl::StatusOr<PipelineSchedule> Lowered(const PipelineSchedule& s) {
  bool crosses = false;
  for (int st = 0; st + 1 < s.num_stages; ++st) {
    crosses |= s.stage_to_rank[st] != s.stage_to_rank[st + 1];
  }
  if (!crosses || s.HasCommunication()) return s;
  return schedule::InsertSendRecv(s);
}

}  // namespace

absl::StatusOr<SimulatedScenario> SimulateScenario(const Scenario& sc, bool record_timeline) {
  SimulatedScenario out;
  PIPEPLAN_ASSIGN_OR_RETURN(out.lowered, Lowered(sc.schedule));
  schedule::SimulateOptions options;
  options.record_timeline = record_timeline;
  PIPEPLAN_ASSIGN_OR_RETURN(out.sim, schedule::Simulate(out.lowered, sc.costs, options));
  return out;
}

absl::StatusOr<Scenario> ScenarioFromPlan(const v1::Plan& plan) {
  PIPEPLAN_ASSIGN_OR_RETURN(DecodedPlan decoded, DecodePlan(plan));
  Scenario sc;
  sc.source = "plan";
  sc.chunks_per_rank = decoded.chunks_per_rank;
  sc.schedule = std::move(decoded.compute_schedule);
  for (const DecodedStage& st : decoded.stages) {
    const double comm_half = st.comm_seconds / 2;
    sc.costs.forward.push_back(st.forward_seconds + comm_half);
    sc.costs.backward_input.push_back(st.backward_seconds / 2 + comm_half);
    sc.costs.backward_weight.push_back(st.backward_seconds / 2);
    sc.costs.param_bytes.push_back(st.param_bytes);
    sc.costs.activation_bytes.push_back(st.activation_bytes);
  }
  return sc;
}

namespace {

// A schedule named by --schedule with --ranks, --microbatches and
// --chunks-per-rank, at unit stage times.
absl::StatusOr<Scenario> FromScheduleFlags(const common::ParsedFlags& flags) {
  if (!flags.Has("schedule")) {
    return common::UsageError(
        "say what to simulate: --schedule NAME --ranks P --microbatches M, --csv FILE, "
        "--plan FILE or --graph FILE --cluster FILE");
  }
  PIPEPLAN_ASSIGN_OR_RETURN(std::string name, flags.Require("schedule"));
  absl::StatusOr<ScheduleKind> kind = schedule::ParseScheduleKind(name);
  if (!kind.ok()) return common::UsageError(absl::StrCat("--schedule: ", kind.status().message()));
  PIPEPLAN_ASSIGN_OR_RETURN(int ranks, flags.GetInt("ranks", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(int microbatches, flags.GetInt("microbatches", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(int chunks_per_rank,
                            flags.GetInt("chunks-per-rank", kDefaultChunksPerRank));
  if (ranks < 1 || microbatches < 1) {
    return common::UsageError("--schedule needs --ranks P and --microbatches M (>= 1)");
  }
  Scenario sc;
  sc.source = std::string(schedule::ScheduleKindName(*kind));
  sc.chunks_per_rank = schedule::StagesPerRank(*kind, chunks_per_rank);
  PIPEPLAN_ASSIGN_OR_RETURN(sc.schedule,
                            schedule::BuildSchedule(*kind, ranks, microbatches, chunks_per_rank));
  return sc;
}

absl::StatusOr<Scenario> FromFlags(const CommandContext& ctx) {
  const common::ParsedFlags& flags = ctx.flags;
  const int sources = flags.Has("plan") + flags.Has("graph") + flags.Has("csv");
  if (sources > 1) {
    return common::UsageError("give only one of --plan, --graph/--cluster and --csv");
  }
  if (flags.Has("plan")) {
    PIPEPLAN_ASSIGN_OR_RETURN(std::string path, flags.Require("plan"));
    PIPEPLAN_ASSIGN_OR_RETURN(std::string text, common::ReadFileToString(path));
    v1::Plan plan;
    if (absl::Status s = ParseJson(text, &plan); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
    }
    return ScenarioFromPlan(plan);
  }
  if (flags.Has("graph") || flags.Has("cluster")) {
    PIPEPLAN_ASSIGN_OR_RETURN(v1::PlanRequest req, RequestFromFlags(flags));
    PIPEPLAN_ASSIGN_OR_RETURN(v1::Plan plan, PlanAnywhere(ctx.global, req));
    return ScenarioFromPlan(plan);
  }
  Scenario sc;
  if (flags.Has("csv")) {
    PIPEPLAN_ASSIGN_OR_RETURN(std::string path, flags.Require("csv"));
    PIPEPLAN_ASSIGN_OR_RETURN(std::string text, common::ReadFileToString(path));
    absl::StatusOr<PipelineSchedule> s = schedule::ScheduleFromCsv(text);
    if (!s.ok())
      return absl::Status(s.status().code(), absl::StrCat(path, ": ", s.status().message()));
    sc.source = "csv";
    sc.schedule = *std::move(s);
    sc.chunks_per_rank = sc.schedule.num_stages / sc.schedule.num_ranks;
  } else {
    PIPEPLAN_ASSIGN_OR_RETURN(sc, FromScheduleFlags(flags));
  }
  // Unit stage times: F = I = W = 1, so a full backward B takes 2.
  sc.costs = StageCosts::Uniform(sc.schedule.num_stages, 1, 1, 1);
  return sc;
}

// --noise R: the step's p50 and p90 (and mean) when every action kind of
// every rank varies by up to R from step to step (step_spread.h, seeded by
// --seed, --samples draws). nullopt without --noise.
absl::StatusOr<std::optional<StepQuantiles>> NoiseQuantiles(const common::ParsedFlags& flags,
                                                            const Scenario& sc,
                                                            const PipelineSchedule& lowered) {
  if (!flags.Has("noise")) return std::nullopt;
  PIPEPLAN_ASSIGN_OR_RETURN(double noise, flags.GetDouble("noise", 0));
  PIPEPLAN_ASSIGN_OR_RETURN(int samples, flags.GetInt("samples", 200));
  PIPEPLAN_ASSIGN_OR_RETURN(int seed, flags.GetInt("seed", 1));
  if (!(noise >= 0 && noise < 1) || samples < 1) {
    return common::UsageError("--noise takes 0 <= R < 1 and --samples at least 1");
  }
  std::vector<std::string> rank_of_stage;
  for (int st = 0; st < lowered.num_stages; ++st) {
    rank_of_stage.push_back(absl::StrCat("rank", lowered.stage_to_rank[st]));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(StepQuantiles q,
                            SampleSteps(lowered, sc.costs, rank_of_stage, UniformSpread(noise),
                                        {.samples = samples, .seed = static_cast<uint64_t>(seed)}));
  return q;
}

std::string QuantilesJson(const std::optional<StepQuantiles>& q) {
  if (!q) return "";
  return absl::StrCat("  \"p50_step_seconds\": ", JsonNumber(q->p50_seconds),
                      ",\n  \"p90_step_seconds\": ", JsonNumber(q->p90_seconds),
                      ",\n  \"mean_step_seconds\": ", JsonNumber(q->mean_seconds), ",\n");
}

std::string ReportJson(const Scenario& sc, const PipelineSchedule& s,
                       const schedule::SimulationResult& sim,
                       const std::optional<schedule::UnitTimeResult>& unit,
                       const std::optional<StepQuantiles>& q) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"schedule\": ", JsonString(sc.source), ",\n");
  absl::StrAppend(&out, "  \"ranks\": ", s.num_ranks, ",\n");
  absl::StrAppend(&out, "  \"stages\": ", s.num_stages, ",\n");
  absl::StrAppend(&out, "  \"microbatches\": ", s.num_microbatches, ",\n");
  absl::StrAppend(&out, "  \"unit_time\": ", unit ? "true" : "false", ",\n");
  if (unit) absl::StrAppend(&out, "  \"steps\": ", unit->steps.size(), ",\n");
  absl::StrAppend(&out, "  \"step_seconds\": ", JsonNumber(sim.step_seconds), ",\n");
  absl::StrAppend(&out, "  \"bubble_ratio\": ", JsonNumber(sim.bubble_ratio), ",\n");
  absl::StrAppend(&out, QuantilesJson(q));
  absl::StrAppend(&out, "  \"busy_seconds\": ", JsonArray(sim.busy_seconds, JsonNumber), ",\n");
  absl::StrAppend(&out, "  \"peak_inflight_microbatches\": ",
                  JsonArray(sim.peak_inflight_microbatches, [](int x) { return absl::StrCat(x); }),
                  ",\n");
  absl::StrAppend(&out, "  \"actions\": [");
  for (int r = 0; r < s.num_ranks; ++r) {
    absl::StrAppend(&out, r ? ",\n    " : "\n    ",
                    JsonArray(s.programs[r], [](const std::optional<schedule::Action>& a) {
                      return a ? JsonString(schedule::ActionToString(*a)) : std::string("null");
                    }));
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

std::string ReportTable(const Scenario& sc, const PipelineSchedule& s,
                        const schedule::SimulationResult& sim,
                        const std::optional<schedule::UnitTimeResult>& unit,
                        const std::optional<StepQuantiles>& q) {
  std::string out =
      absl::StrFormat("%s: %d ranks, %d stages, %d microbatches, %d actions\n\n", sc.source,
                      s.num_ranks, s.num_stages, s.num_microbatches, s.NumActions());
  if (unit) {
    absl::StrAppend(&out, schedule::FormatUnitTimeline(*unit), "\nsteps: ", unit->steps.size(),
                    "\n");
  } else {
    absl::StrAppend(&out, schedule::FormatTimeline(sim, s.num_ranks), "\n");
  }
  absl::StrAppendFormat(&out, "step_seconds: %.6g\nbubble_ratio: %.6f\n", sim.step_seconds,
                        sim.bubble_ratio);
  if (q) {
    absl::StrAppendFormat(&out, "under noise: p50 %.6g s, p90 %.6g s, mean %.6g s (%d samples)\n",
                          q->p50_seconds, q->p90_seconds, q->mean_seconds, q->samples);
  }
  for (int r = 0; r < s.num_ranks; ++r) {
    absl::StrAppendFormat(&out, "  rank %d: busy %.6g s, idle %.6g s, peak in flight %d\n", r,
                          sim.busy_seconds[r], sim.idle_seconds[r],
                          sim.peak_inflight_microbatches[r]);
  }
  return out;
}

// --trace, --svg and --save-csv: the files the simulated step goes to.
absl::Status WriteFiles(const common::ParsedFlags& flags, const Scenario& sc,
                        const SimulatedScenario& run, std::span<const TraceSpan> spans) {
  const PipelineSchedule& s = run.lowered;
  if (auto path = flags.Get("save-csv")) {
    PIPEPLAN_RETURN_IF_ERROR(WriteTextFile(*path, schedule::ScheduleToCsv(s)));
  }
  if (auto path = flags.Get("trace")) {
    PIPEPLAN_RETURN_IF_ERROR(WriteTextFile(
        *path, FormatChromeTrace(spans, s.num_ranks, absl::StrCat("predicted: ", sc.source))));
  }
  if (auto path = flags.Get("svg")) {
    TimelinePanel panel{
        absl::StrFormat("predicted: step %s, bubble %.1f%%", HumanSeconds(run.sim.step_seconds),
                        100 * run.sim.bubble_ratio),
        std::vector<TraceSpan>(spans.begin(), spans.end()), s.num_ranks};
    const std::string title = absl::StrFormat("%s: %d ranks, %d stages, %d microbatches", sc.source,
                                              s.num_ranks, s.num_stages, s.num_microbatches);
    PIPEPLAN_RETURN_IF_ERROR(
        WriteOutputFile(*path, TimelineSvg(title, std::span(&panel, 1)), "SVG"));
  }
  return absl::OkStatus();
}

absl::Status RunSimulate(const CommandContext& ctx) {
  const common::ParsedFlags& flags = ctx.flags;
  PIPEPLAN_ASSIGN_OR_RETURN(Scenario sc, FromFlags(ctx));
  const bool unit_time = flags.Has("unit-time");
  const bool json = ctx.global.output == Output::kJson;
  const bool ascii = flags.Has("ascii");
  PIPEPLAN_ASSIGN_OR_RETURN(SimulatedScenario run,
                            SimulateScenario(sc, (!unit_time && !json) || flags.Has("trace") ||
                                                     flags.Has("svg") || ascii));
  const PipelineSchedule& lowered = run.lowered;
  std::optional<schedule::UnitTimeResult> unit;
  if (unit_time) {
    PIPEPLAN_ASSIGN_OR_RETURN(unit, schedule::SimulateUnitTime(lowered));
  }
  const std::vector<TraceSpan> spans = SpansOfSimulation(run.sim);
  PIPEPLAN_RETURN_IF_ERROR(WriteFiles(flags, sc, run, spans));
  if (ascii) {
    std::cout << FormatGantt(spans, lowered.num_ranks, 100);
    return absl::OkStatus();
  }
  PIPEPLAN_ASSIGN_OR_RETURN(std::optional<StepQuantiles> q, NoiseQuantiles(flags, sc, lowered));
  std::cout << (json ? ReportJson(sc, lowered, run.sim, unit, q)
                     : ReportTable(sc, lowered, run.sim, unit, q));
  return absl::OkStatus();
}

}  // namespace

Command SimulateCommand() {
  Command c =
      MakeCommand("simulate", "simulate a pipeline schedule; print its timeline and bubble ratio",
                  "What to simulate, one of:\n"
                  "  --schedule NAME --ranks P --microbatches M [--chunks-per-rank V]\n"
                  "  --csv FILE        a schedule in PyTorch's CSV layout\n"
                  "  --plan FILE       a Plan as `plan -o json` prints it, with its stage times\n"
                  "  --graph FILE --cluster FILE [plan options]   plan first, then simulate\n"
                  "Without a plan every stage takes F=1, I=1, W=1 (B=I+W=2).\n",
                  RunSimulate);
  c.flags.Section("simulation")
      .Value("plan", "FILE", "a Plan (JSON) to simulate with its stage times")
      .Value("csv", "FILE", "a schedule in PyTorch's CSV layout")
      .Switch("unit-time", "PyTorch's unit-time simulator (every action one step)")
      .Value("save-csv", "FILE", "write the simulated (lowered) schedule as CSV")
      .Value("trace", "FILE",
             "write the predicted timeline as Chrome trace JSON (Perfetto; compare with\n"
             "`jobs trace`)")
      .Value("svg", "FILE",
             "draw the predicted timeline as an SVG picture (a lane per rank, boxes by kind)")
      .Switch("ascii", "print the timeline as a terminal Gantt chart instead of the table")
      .Value("noise", "R",
             "also the step's p50 and p90 when every action varies by up to\n"
             "R (e.g. 0.1) from step to step, sampled")
      .Value("samples", "N", "steps sampled for --noise (200)")
      .Value("seed", "S", "seed of the --noise sampling (1): the same seed, the same figures");
  c.flags.Include(PlanOptionFlags()).Include(PlanInputFlags());
  return c;
}

}  // namespace pipeplan::cli
