// The rendezvous key-value space of every job: workers publish their
// transport addresses here for a plan version ("v<N>/..." keys) and read
// their peers'. Memory only (and the store when replicated, so workers on
// other replicas see the keys); bounded per value, per job and for all jobs
// together (JobRegistry::Options). Keys of versions older than the
// previous one are dropped when a version is published.
//
// Thread safety: none; JobRegistry calls it under its lock (job_table.h).
#ifndef PIPEPLAN_SERVER_JOBS_RENDEZVOUS_SPACE_H_
#define PIPEPLAN_SERVER_JOBS_RENDEZVOUS_SPACE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job_table.h"

namespace pipeplan::server::internal {

class RendezvousSpace {
 public:
  explicit RendezvousSpace(const RegistryContext* ctx) : ctx_(ctx) {}

  // What can be refused before the job is looked up: the key's length and
  // the value's size.
  static absl::Status CheckEntry(const std::string& key, const std::string& value,
                                 const JobRegistry::Options& options);
  // Sets `key` of `job`; RESOURCE_EXHAUSTED past a limit of the job or of
  // all jobs. Replicated: written to the store first.
  absl::Status Set(Job& job, const std::string& key, const std::string& value);
  // found=false for a key not set yet. Replicated: a key not in memory is
  // read from the store (set through another replica).
  absl::StatusOr<v1::RendezvousGetResponse> Get(const Job& job, const std::string& key) const;
  // Replicated: a job this replica has not synced yet, from the store.
  absl::StatusOr<v1::RendezvousGetResponse> GetStored(const std::string& job_id,
                                                      const std::string& key) const;
  // Drops `job`'s keys of versions before `oldest_kept`.
  void DropBefore(Job& job, int64_t oldest_kept);
  // Drops every key of `job`; returns the bytes freed.
  int64_t Clear(Job& job);
  // Key and value bytes held, all jobs together.
  int64_t bytes() const { return bytes_; }

 private:
  const RegistryContext* const ctx_;
  int64_t bytes_ = 0;
};

}  // namespace pipeplan::server::internal

#endif  // PIPEPLAN_SERVER_JOBS_RENDEZVOUS_SPACE_H_
