// The Store's shared-store methods for stores one planner has to itself
// (SQLite, memory): there is nobody to share with, so they are UNIMPLEMENTED
// and the registry never calls them (Store::shared() is false).
#include "pipeplan/server/store/store.h"

namespace pipeplan::server {
namespace {

absl::Status NotShared() {
  return absl::UnimplementedError("this store is not shared between planners");
}

}  // namespace

absl::StatusOr<std::vector<JobHead>> Store::JobHeads() { return NotShared(); }

absl::StatusOr<StoredJob> Store::LoadJob(const std::string&) { return NotShared(); }

absl::StatusOr<WorkerRecord> Store::GetWorker(const std::string&, const std::string&) {
  return NotShared();
}

absl::Status Store::TouchWorkers(const std::vector<WorkerHeartbeat>&) { return NotShared(); }

absl::StatusOr<JobLease> Store::ClaimJob(const std::string&, const std::string&, const std::string&,
                                         absl::Duration, bool) {
  return NotShared();
}

absl::StatusOr<std::vector<JobLease>> Store::RenewJobLeases(const std::string&, absl::Duration) {
  return NotShared();
}

absl::Status Store::AppendPlanFenced(const v1::VersionedPlan&, const JobLease&) {
  return NotShared();
}

absl::Status Store::SetJobStateFenced(const std::string&, v1::JobState, const std::string&,
                                      const JobLease&) {
  return NotShared();
}

absl::Status Store::RendezvousPut(const std::string&, const std::string&, const std::string&,
                                  int64_t) {
  return NotShared();
}

absl::StatusOr<std::optional<std::string>> Store::RendezvousFetch(const std::string&,
                                                                  const std::string&) {
  return NotShared();
}

absl::Status Store::RendezvousTrim(const std::string&, int64_t) { return NotShared(); }

}  // namespace pipeplan::server
