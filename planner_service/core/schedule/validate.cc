#include "pipeplan/core/schedule/validate.h"

#include "engine.h"
#include "structure.h"

namespace pipeplan::schedule {

absl::Status ValidateSchedule(const PipelineSchedule& schedule) {
  bool comms = false;
  if (absl::Status st = internal::CheckStructure(schedule, &comms); !st.ok()) return st;
  return internal::Execute(schedule, comms, /*costs=*/nullptr, /*record_timeline=*/false).status();
}

}  // namespace pipeplan::schedule
