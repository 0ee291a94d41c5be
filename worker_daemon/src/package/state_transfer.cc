#include "pipeplan/worker/package/state_transfer.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/transport/collectives.h"

namespace pipeplan::worker {
namespace {

struct Hop {
  std::string name;
  int source = 0;
  int dest = 0;
  uint64_t index = 0;  // tells this hop's messages apart
};

// Every (name, new owner) whose source is another rank and that involves
// this rank.
absl::StatusOr<std::vector<Hop>> Plan(int rank, const NamedStateView& mine,
                                      const ParameterOwners& from, const ParameterOwners& to,
                                      NamedState& local) {
  std::vector<Hop> hops;
  uint64_t index = 0;
  for (const auto& [name, owners] : to) {
    auto it = from.find(name);
    if (it == from.end() || it->second.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter \"", name, "\" of the new plan has no owner in the old one"));
    }
    const int source = it->second.front();
    if (source == rank && !mine.contains(name)) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", rank, " should send parameter \"", name, "\" but holds no state"));
    }
    for (int dest : owners) {
      ++index;
      if (dest == source) {
        if (dest == rank) {
          const std::span<const std::byte> blob = mine.at(name);
          local[name].assign(blob.begin(), blob.end());
        }
      } else if (dest == rank || source == rank) {
        hops.push_back({name, source, dest, index});
      }
    }
  }
  return hops;
}

absl::Status WaitAll(std::vector<std::unique_ptr<PendingOp>>& ops, absl::Duration timeout) {
  for (auto& op : ops) PIPEPLAN_RETURN_IF_ERROR(op->Wait(timeout));
  ops.clear();
  return absl::OkStatus();
}

}  // namespace

NamedStateView ViewsOf(const NamedState& state) {
  NamedStateView out;
  for (const auto& [name, blob] : state) out[name] = blob;
  return out;
}

absl::StatusOr<NamedState> MoveState(Transport& transport, const NamedState& mine,
                                     const ParameterOwners& from, const ParameterOwners& to,
                                     uint64_t epoch, absl::Duration timeout) {
  return MoveState(transport, ViewsOf(mine), from, to, epoch, timeout);
}

absl::StatusOr<NamedState> MoveState(Transport& transport, const NamedStateView& mine,
                                     const ParameterOwners& from, const ParameterOwners& to,
                                     uint64_t epoch, absl::Duration timeout) {
  const int rank = transport.rank();
  NamedState out;
  PIPEPLAN_ASSIGN_OR_RETURN(std::vector<Hop> hops, Plan(rank, mine, from, to, out));
  // Sizes first, so receivers can size their buffers; then the bytes.
  std::vector<int64_t> sizes(hops.size());
  std::vector<std::unique_ptr<PendingOp>> ops;
  for (size_t i = 0; i < hops.size(); ++i) {
    const Hop& h = hops[i];
    const uint64_t tag = ExecutorTag(TagPurpose::kStateSize, epoch, h.index);
    auto bytes = std::as_writable_bytes(std::span<int64_t>(&sizes[i], 1));
    if (h.source == rank) {
      sizes[i] = static_cast<int64_t>(mine.at(h.name).size());
      PIPEPLAN_ASSIGN_OR_RETURN(auto op, transport.Send(h.dest, tag, bytes));
      ops.push_back(std::move(op));
    } else {
      PIPEPLAN_ASSIGN_OR_RETURN(auto op, transport.Recv(h.source, tag, bytes));
      ops.push_back(std::move(op));
    }
  }
  PIPEPLAN_RETURN_IF_ERROR(WaitAll(ops, timeout));
  for (size_t i = 0; i < hops.size(); ++i) {
    const Hop& h = hops[i];
    const uint64_t tag = ExecutorTag(TagPurpose::kStateData, epoch, h.index);
    if (h.source == rank) {
      PIPEPLAN_ASSIGN_OR_RETURN(auto op, transport.Send(h.dest, tag, mine.at(h.name)));
      ops.push_back(std::move(op));
    } else {
      std::vector<std::byte>& buffer = out[h.name];
      buffer.resize(static_cast<size_t>(sizes[i]));
      PIPEPLAN_ASSIGN_OR_RETURN(auto op, transport.Recv(h.source, tag, buffer));
      ops.push_back(std::move(op));
    }
  }
  PIPEPLAN_RETURN_IF_ERROR(WaitAll(ops, timeout));
  return out;
}

}  // namespace pipeplan::worker
