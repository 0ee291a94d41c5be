// Helpers shared by the schedule tests: build schedules from compact text,
// and the sweep of every buildable schedule.
#ifndef PIPEPLAN_TESTS_UNIT_SCHEDULE_TEST_UTIL_H_
#define PIPEPLAN_TESTS_UNIT_SCHEDULE_TEST_UTIL_H_

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "pipeplan/core/schedule/action.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"
#include "pipeplan/core/schedule/schedule_kind.h"
#include "pipeplan/core/schedule/stage_costs.h"

namespace pipeplan::schedule::testing {

// One rank's program as PyTorch prints it, idle slots as "_".
inline std::string ProgramString(const RankProgram& program) {
  return absl::StrJoin(program, ",", [](std::string* out, const std::optional<Action>& a) {
    out->append(a ? ActionToString(*a) : "_");
  });
}

// Parses "0F0,_,0B0" ("_" or "" is idle); fails the test on a bad action.
inline RankProgram Program(const std::string& text) {
  RankProgram program;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string cell = text.substr(start, end - start);
    if (cell == "_") cell.clear();
    absl::StatusOr<std::optional<Action>> a = ParseAction(cell);
    EXPECT_TRUE(a.ok()) << cell << ": " << a.status();
    program.push_back(a.ok() ? *a : std::nullopt);
    start = end + 1;
  }
  return program;
}

inline PipelineSchedule MakeSchedule(std::vector<int> stage_to_rank, int microbatches,
                                     const std::vector<std::string>& programs) {
  PipelineSchedule s;
  s.num_ranks = static_cast<int>(programs.size());
  s.num_stages = static_cast<int>(stage_to_rank.size());
  s.num_microbatches = microbatches;
  s.stage_to_rank = std::move(stage_to_rank);
  for (const std::string& p : programs) s.programs.push_back(Program(p));
  return s;
}

struct BuiltSchedule {
  ScheduleKind kind;
  int ranks;
  int microbatches;
  int chunks;  // BuildSchedule's stages-per-rank argument
  PipelineSchedule schedule;
  // "<kind> p=<ranks> m=<microbatches> v=<chunks>", for failure messages.
  std::string label;
};

// Every schedule BuildSchedule accepts for every kind x 1..5 ranks x 1..12
// microbatches x 1..3 chunks (the sweep the property tests run over).
inline std::vector<BuiltSchedule> EveryBuildableSchedule() {
  std::vector<BuiltSchedule> out;
  for (ScheduleKind kind : kAllScheduleKinds) {
    for (int p = 1; p <= 5; ++p) {
      for (int m = 1; m <= 12; ++m) {
        for (int v = 1; v <= 3; ++v) {
          absl::StatusOr<PipelineSchedule> s = BuildSchedule(kind, p, m, v);
          if (!s.ok()) continue;
          out.push_back(
              {kind, p, m, v, *std::move(s),
               absl::StrCat(std::string(ScheduleKindName(kind)), " p=", p, " m=", m, " v=", v)});
        }
      }
    }
  }
  return out;
}

// Compute and transfer seconds drawn uniformly from [lo, hi): per stage F, I,
// W, then per boundary forward and backward transfer (memory and host time
// left empty).
inline StageCosts RandomTimes(int stages, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> time(lo, hi);
  StageCosts costs;
  for (int st = 0; st < stages; ++st) {
    costs.forward.push_back(time(rng));
    costs.backward_input.push_back(time(rng));
    costs.backward_weight.push_back(time(rng));
  }
  for (int b = 0; b + 1 < stages; ++b) {
    costs.forward_transfer.push_back(time(rng));
    costs.backward_transfer.push_back(time(rng));
  }
  return costs;
}

}  // namespace pipeplan::schedule::testing

#endif  // PIPEPLAN_TESTS_UNIT_SCHEDULE_TEST_UTIL_H_
