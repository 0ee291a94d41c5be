// A Transport over a subset of another transport's ranks: the pipeline of
// one data-parallel replica, or the replica group of one pipeline rank, both
// carved out of the plan's one transport over every device (replicas x
// ranks), so one rendezvous connects them all.
//
// Rank i of the group is rank members[i] of the base. Send/Recv pass the tag
// through: two groups of a plan never share a pair of base ranks (a pipeline
// pairs devices of one replica, a replica group devices of one rank), so
// their tags cannot meet; AllReduceMax uses tags of its own (at 1 << 61,
// above the base's control tags and below the executor's) so it never meets
// the base's AllReduceMax either.
//
// Thread safety: as the base; the base must outlive the group.
#ifndef PIPEPLAN_WORKER_GROUP_TRANSPORT_H_
#define PIPEPLAN_WORKER_GROUP_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

class GroupTransport final : public Transport {
 public:
  // INVALID_ARGUMENT unless `members` are distinct ranks of `base` and
  // include base->rank().
  static absl::StatusOr<std::unique_ptr<GroupTransport>> Create(Transport* base,
                                                                std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string name() const override { return base_->name(); }
  bool TakesDeviceBuffers() const override { return base_->TakesDeviceBuffers(); }

  absl::StatusOr<std::unique_ptr<PendingOp>> Send(int peer, uint64_t tag,
                                                  std::span<const std::byte> data) override;
  absl::StatusOr<std::unique_ptr<PendingOp>> Recv(int peer, uint64_t tag,
                                                  std::span<std::byte> data) override;
  // Gathers at the group's rank 0, which sends the maximum back.
  absl::StatusOr<int64_t> AllReduceMax(int64_t value, absl::Duration timeout) override;
  // Aborts the base transport, so every group over it too.
  void Abort() override { base_->Abort(); }

 private:
  GroupTransport(Transport* base, std::vector<int> members, int rank)
      : base_(base), members_(std::move(members)), rank_(rank) {}
  absl::Status CheckPeer(int peer) const;

  Transport* base_;
  std::vector<int> members_;
  int rank_;
  uint64_t control_seq_ = 0;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_GROUP_TRANSPORT_H_
