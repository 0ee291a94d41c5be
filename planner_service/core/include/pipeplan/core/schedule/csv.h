// CSV exchange format for schedules.
//
// Lets a user hand the planner a custom schedule (or take one of ours to
// PyTorch, whose _load_csv/_dump_csv use the same layout): one row per rank,
// in rank order, one action per cell in the action IR's notation ("0F0",
// "1SEND_F3", "(0F3;3B1)OVERLAP_F_B"); an empty cell is an idle slot. Rows may
// have different lengths. Cells may be double-quoted.
//
// Parsing only: the caller reads the file (the core library does no I/O).
#ifndef PIPEPLAN_CORE_SCHEDULE_CSV_H_
#define PIPEPLAN_CORE_SCHEDULE_CSV_H_

#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/schedule/pipeline_schedule.h"

namespace pipeplan::schedule {

struct CsvOptions {
  // 0: one more than the largest microbatch index in the file.
  int num_microbatches = 0;
  // Empty: each stage lives on the (single) rank whose row mentions it.
  std::vector<int> stage_to_rank;
  // Run ValidateSchedule on the result.
  bool validate = true;
};

std::string ScheduleToCsv(const PipelineSchedule& schedule);

absl::StatusOr<PipelineSchedule> ScheduleFromCsv(std::string_view csv,
                                                 const CsvOptions& options = {});
// Reads `in` to its end and parses it; DATA_LOSS when the stream fails.
absl::StatusOr<PipelineSchedule> ScheduleFromCsv(std::istream& in, const CsvOptions& options = {});

}  // namespace pipeplan::schedule

#endif  // PIPEPLAN_CORE_SCHEDULE_CSV_H_
