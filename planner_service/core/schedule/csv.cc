#include "pipeplan/core/schedule/csv.h"

#include <algorithm>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pipeplan/core/schedule/validate.h"
#include "string_util.h"

namespace pipeplan::schedule {
namespace {

// Splits one CSV line into cells, honouring double quotes ("" inside quotes is
// a literal quote). Action strings never need quoting, but spreadsheet tools
// add quotes freely.
absl::StatusOr<std::vector<std::string>> SplitCsvLine(std::string_view line, int row) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back().push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back().push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back().push_back(c);
    }
  }
  if (quoted) {
    return absl::InvalidArgumentError(
        absl::StrFormat("schedule CSV row %d has an unterminated quote", row));
  }
  return cells;
}

}  // namespace

std::string ScheduleToCsv(const PipelineSchedule& schedule) {
  std::string out;
  for (const RankProgram& program : schedule.programs) {
    out += absl::StrJoin(program, ",", [](std::string* s, const std::optional<Action>& a) {
      if (a) s->append(ActionToString(*a));
    });
    out.push_back('\n');
  }
  return out;
}

namespace {

// The largest stage and microbatch any parsed action names.
struct Extent {
  int max_stage = -1;
  int max_mb = -1;
};

// One rank's program from one CSV row.
absl::StatusOr<RankProgram> ParseRow(absl::string_view line, int row, Extent& extent) {
  absl::StatusOr<std::vector<std::string>> cells =
      SplitCsvLine(internal::StripWhitespace(internal::ToStd(line)), row);
  if (!cells.ok()) return cells.status();
  RankProgram program;
  program.reserve(cells->size());
  for (size_t col = 0; col < cells->size(); ++col) {
    absl::StatusOr<std::optional<Action>> action = ParseAction((*cells)[col]);
    if (!action.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("schedule CSV rank %d step %d: %s", row, col, action.status().message()));
    }
    if (*action) {
      const Action& a = **action;
      extent.max_stage = std::max({extent.max_stage, static_cast<int>(a.stage), a.backward_stage});
      extent.max_mb = std::max({extent.max_mb, a.microbatch, a.backward_microbatch});
    }
    program.push_back(*action);
  }
  // Trailing empty cells carry no information.
  while (!program.empty() && !program.back()) program.pop_back();
  return program;
}

// The rank of every stage, from the ranks whose programs mention it; each
// stage on exactly one rank.
absl::Status InferStageToRank(PipelineSchedule& schedule) {
  for (int r = 0; r < schedule.num_ranks; ++r) {
    for (size_t i = 0; i < schedule.programs[r].size(); ++i) {
      const std::optional<Action>& a = schedule.programs[r][i];
      if (!a) continue;
      for (int stage : {static_cast<int>(a->stage), a->backward_stage}) {
        if (stage < 0) continue;
        int& owner = schedule.stage_to_rank[stage];
        if (owner >= 0 && owner != r) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "schedule CSV rank %d step %d (%s): stage %d already appears on rank %d", r, i,
              ActionToString(*a), stage, owner));
        }
        owner = r;
      }
    }
  }
  for (int st = 0; st < schedule.num_stages; ++st) {
    if (schedule.stage_to_rank[st] < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("schedule CSV never mentions stage %d, so its rank is unknown", st));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PipelineSchedule> ScheduleFromCsv(std::string_view csv, const CsvOptions& options) {
  PipelineSchedule schedule;
  Extent extent;
  std::vector<absl::string_view> lines = absl::StrSplit(internal::ToAbsl(csv), '\n');
  // A trailing newline is not an extra (empty) rank.
  while (!lines.empty() && internal::StripWhitespace(internal::ToStd(lines.back())).empty()) {
    lines.pop_back();
  }
  for (size_t row = 0; row < lines.size(); ++row) {
    absl::StatusOr<RankProgram> program = ParseRow(lines[row], static_cast<int>(row), extent);
    if (!program.ok()) return program.status();
    schedule.programs.push_back(*std::move(program));
  }
  if (schedule.programs.empty() || extent.max_stage < 0) {
    return absl::InvalidArgumentError("schedule CSV has no actions");
  }
  schedule.num_ranks = static_cast<int>(schedule.programs.size());
  schedule.num_microbatches =
      options.num_microbatches > 0 ? options.num_microbatches : extent.max_mb + 1;
  if (!options.stage_to_rank.empty()) {
    schedule.stage_to_rank = options.stage_to_rank;
    schedule.num_stages = static_cast<int>(options.stage_to_rank.size());
  } else {
    schedule.num_stages = extent.max_stage + 1;
    schedule.stage_to_rank.assign(schedule.num_stages, -1);
    if (absl::Status st = InferStageToRank(schedule); !st.ok()) return st;
  }
  if (options.validate) {
    if (absl::Status st = ValidateSchedule(schedule); !st.ok()) return st;
  }
  return schedule;
}

absl::StatusOr<PipelineSchedule> ScheduleFromCsv(std::istream& in, const CsvOptions& options) {
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError("failed to read schedule CSV stream");
  return ScheduleFromCsv(std::string_view(text), options);
}

}  // namespace pipeplan::schedule
