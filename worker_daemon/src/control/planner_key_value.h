// The rendezvous key-value space (KeyValue) over the planner's
// RendezvousSet/RendezvousGet RPCs for one job: how the worker's transports
// find each other with nothing but the planner's address. Private to
// src/control.
#ifndef PIPEPLAN_WORKER_SRC_CONTROL_PLANNER_KEY_VALUE_H_
#define PIPEPLAN_WORKER_SRC_CONTROL_PLANNER_KEY_VALUE_H_

#include <optional>
#include <string>
#include <utility>

#include "pipeplan/worker/env/clock.h"
#include "pipeplan/worker/env/planner_api.h"
#include "pipeplan/worker/transport/rendezvous.h"

namespace pipeplan::worker {

// `planner` and `clock` must outlive it. Set is retried while the planner is
// UNAVAILABLE (20 tries, 50 ms more each time); Get is one call.
class PlannerKeyValue final : public KeyValue {
 public:
  PlannerKeyValue(PlannerApi* planner, std::string job_id, Clock& clock = RealClock())
      : planner_(planner), job_id_(std::move(job_id)), clock_(clock) {}
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) override;

 private:
  PlannerApi* planner_;
  std::string job_id_;
  Clock& clock_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_CONTROL_PLANNER_KEY_VALUE_H_
