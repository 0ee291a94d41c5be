// A job's plan versions and their watchers: the next version checked
// against the job's state, written to the store (fenced by this planner's
// lease when replicated), then applied to memory — new ranks, every live
// watcher told — and a watch that starts from the version a worker knows.
//
// Thread safety: none; JobRegistry calls it under its lock (job_table.h).
// PlanWatcher callbacks run there too, so they must only queue work.
#ifndef PIPEPLAN_SERVER_JOBS_PLAN_VERSIONS_H_
#define PIPEPLAN_SERVER_JOBS_PLAN_VERSIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job_table.h"

namespace pipeplan::server::internal {

class PlanVersions {
 public:
  explicit PlanVersions(const RegistryContext* ctx) : ctx_(ctx) {}

  // The version after the job's current one. FAILED_PRECONDITION for a
  // cancelled job; ABORTED when `expected_version` > 0 is not the current.
  absl::StatusOr<v1::VersionedPlan> Next(const Job& job, const v1::PlanRequest& request,
                                         const v1::Plan& plan, const std::string& reason,
                                         int64_t expected_version) const;
  // Writes `plan` to the store. Replicated, only its owner writes it, fenced
  // by its lease; an operator's replan takes the job over (the next token).
  absl::Status Store(const v1::VersionedPlan& plan, PublishAs as) const;
  // Memory and watchers follow `plan`, a version already in the store. The
  // caller drops the rendezvous keys it outdates (RendezvousSpace).
  void Apply(Job& job, std::shared_ptr<const v1::VersionedPlan> plan) const;
  // Subscribes `watcher`; it gets the current version at once when newer
  // than `known_version`. CANCELLED when the watcher is already gone.
  absl::Status Watch(Job& job, const std::string& worker_id, int64_t known_version,
                     const std::weak_ptr<PlanWatcher>& watcher) const;
  // Stores `plans` as the current version's contingencies under a new
  // generation (VersionedPlan.contingency_generation).
  void SetContingencies(Job& job, std::vector<v1::ContingencyPlan> plans) const;
  // When `out` is the version the job's contingencies were computed for:
  // their generation, and the plans unless the caller knows that generation.
  void AddContingencies(const Job& job, int64_t known_generation, v1::VersionedPlan& out) const;

 private:
  const RegistryContext* const ctx_;
};

}  // namespace pipeplan::server::internal

#endif  // PIPEPLAN_SERVER_JOBS_PLAN_VERSIONS_H_
