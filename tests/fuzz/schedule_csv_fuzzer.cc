// Fuzzes the schedule CSV reader (`pipeplan simulate --csv FILE`, a file the
// user hands over) and both simulators on what it accepts. A schedule that
// reads back must also survive a round trip: written as CSV and read again,
// it is accepted (else the fuzzer aborts).
//
// Input: first byte: validate or not, and how many microbatches to assume
// (0: from the file); the rest: the CSV text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "pipeplan/core/schedule/csv.h"
#include "pipeplan/core/schedule/simulator.h"
#include "pipeplan/core/schedule/stage_costs.h"
#include "pipeplan/core/schedule/unit_time.h"

namespace schedule = pipeplan::schedule;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string csv(reinterpret_cast<const char*>(data + 1), size - 1);
  const schedule::CsvOptions options{.num_microbatches = (data[0] >> 1) % 8,
                                     .validate = (data[0] & 1) == 0};
  absl::StatusOr<schedule::PipelineSchedule> s = schedule::ScheduleFromCsv(csv, options);
  if (!s.ok()) return 0;
  const std::string again = schedule::ScheduleToCsv(*s);
  if (!schedule::ScheduleFromCsv(again,
                                 {.num_microbatches = s->num_microbatches, .validate = false})
           .ok()) {
    std::abort();
  }
  if (!options.validate) return 0;
  (void)schedule::SimulateUnitTime(*s);
  (void)schedule::Simulate(*s, schedule::StageCosts::Uniform(s->num_stages, 1, 1, 1));
  return 0;
}
