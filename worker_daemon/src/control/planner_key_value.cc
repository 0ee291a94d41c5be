#include "planner_key_value.h"

namespace pipeplan::worker {

absl::Status PlannerKeyValue::Set(const std::string& key, const std::string& value) {
  absl::Status s;
  for (int attempt = 0; attempt < 20; ++attempt) {
    s = planner_->RendezvousSet(job_id_, key, value);
    if (s.code() != absl::StatusCode::kUnavailable) return s;
    clock_.SleepFor(absl::Milliseconds(50 * (attempt + 1)));
  }
  return s;
}

absl::StatusOr<std::optional<std::string>> PlannerKeyValue::Get(const std::string& key) {
  return planner_->RendezvousGet(job_id_, key);
}

}  // namespace pipeplan::worker
