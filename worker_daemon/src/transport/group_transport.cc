#include "pipeplan/worker/transport/group_transport.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"

namespace pipeplan::worker {
namespace {

constexpr uint64_t kGroupControlTag = uint64_t{1} << 61;

}  // namespace

absl::StatusOr<std::unique_ptr<GroupTransport>> GroupTransport::Create(Transport* base,
                                                                       std::vector<int> members) {
  if (base == nullptr) return absl::InvalidArgumentError("a group needs a base transport");
  const std::set<int> distinct(members.begin(), members.end());
  if (distinct.size() != members.size() || members.empty() || *distinct.begin() < 0 ||
      *distinct.rbegin() >= base->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group members must be distinct ranks of a transport of ", base->size()));
  }
  auto mine = std::find(members.begin(), members.end(), base->rank());
  if (mine == members.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", base->rank(), " is not a member of its group"));
  }
  const int rank = static_cast<int>(mine - members.begin());
  return std::unique_ptr<GroupTransport>(new GroupTransport(base, std::move(members), rank));
}

absl::Status GroupTransport::CheckPeer(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " is not another rank of a group of ", size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PendingOp>> GroupTransport::Send(int peer, uint64_t tag,
                                                                std::span<const std::byte> data) {
  PIPEPLAN_RETURN_IF_ERROR(CheckPeer(peer));
  return base_->Send(members_[peer], tag, data);
}

absl::StatusOr<std::unique_ptr<PendingOp>> GroupTransport::Recv(int peer, uint64_t tag,
                                                                std::span<std::byte> data) {
  PIPEPLAN_RETURN_IF_ERROR(CheckPeer(peer));
  return base_->Recv(members_[peer], tag, data);
}

absl::StatusOr<int64_t> GroupTransport::AllReduceMax(int64_t value, absl::Duration timeout) {
  const int n = size();
  if (n == 1) return value;
  const uint64_t gather = kGroupControlTag + 2 * control_seq_;
  const uint64_t result = gather + 1;
  ++control_seq_;
  auto bytes = [](int64_t& v) { return std::as_writable_bytes(std::span<int64_t>(&v, 1)); };
  int64_t mine = value;
  if (rank_ != 0) {
    int64_t best = value;
    PIPEPLAN_ASSIGN_OR_RETURN(auto recv, Recv(0, result, bytes(best)));
    PIPEPLAN_ASSIGN_OR_RETURN(auto send, Send(0, gather, bytes(mine)));
    PIPEPLAN_RETURN_IF_ERROR(send->Wait(timeout));
    PIPEPLAN_RETURN_IF_ERROR(recv->Wait(timeout));
    return best;
  }
  std::vector<int64_t> theirs(n, value);
  std::vector<std::unique_ptr<PendingOp>> ops;
  for (int r = 1; r < n; ++r) {
    PIPEPLAN_ASSIGN_OR_RETURN(auto op, Recv(r, gather, bytes(theirs[r])));
    ops.push_back(std::move(op));
  }
  for (auto& op : ops) PIPEPLAN_RETURN_IF_ERROR(op->Wait(timeout));
  int64_t best = *std::max_element(theirs.begin(), theirs.end());
  ops.clear();
  for (int r = 1; r < n; ++r) {
    PIPEPLAN_ASSIGN_OR_RETURN(auto op, Send(r, result, bytes(best)));
    ops.push_back(std::move(op));
  }
  for (auto& op : ops) PIPEPLAN_RETURN_IF_ERROR(op->Wait(timeout));
  return best;
}

}  // namespace pipeplan::worker
