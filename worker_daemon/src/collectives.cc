#include "pipeplan/worker/collectives.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "pipeplan/core/status_macros.h"

namespace pipeplan::worker {

absl::Status SumOverRanks(Transport& transport, std::span<double> values, uint64_t epoch,
                          absl::Duration timeout) {
  const int n = transport.size();
  if (n == 1 || values.empty()) return absl::OkStatus();
  const uint64_t gather_tag = ExecutorTag(TagPurpose::kSum, epoch, 0);
  const uint64_t result_tag = ExecutorTag(TagPurpose::kSum, epoch, 1);
  auto bytes = [](std::span<double> v) { return std::as_writable_bytes(v); };
  if (transport.rank() != 0) {
    // The result lands in a separate buffer: `values` is being sent meanwhile.
    std::vector<double> result(values.size());
    PIPEPLAN_ASSIGN_OR_RETURN(auto recv, transport.Recv(0, result_tag, bytes(result)));
    PIPEPLAN_ASSIGN_OR_RETURN(auto send, transport.Send(0, gather_tag, bytes(values)));
    PIPEPLAN_RETURN_IF_ERROR(send->Wait(timeout));
    PIPEPLAN_RETURN_IF_ERROR(recv->Wait(timeout));
    std::copy(result.begin(), result.end(), values.begin());
    return absl::OkStatus();
  }
  std::vector<std::vector<double>> theirs(n, std::vector<double>(values.size()));
  std::vector<std::unique_ptr<PendingOp>> ops;
  for (int r = 1; r < n; ++r) {
    PIPEPLAN_ASSIGN_OR_RETURN(auto op, transport.Recv(r, gather_tag, bytes(theirs[r])));
    ops.push_back(std::move(op));
  }
  for (auto& op : ops) PIPEPLAN_RETURN_IF_ERROR(op->Wait(timeout));
  for (int r = 1; r < n; ++r) {
    for (size_t i = 0; i < values.size(); ++i) values[i] += theirs[r][i];
  }
  ops.clear();
  for (int r = 1; r < n; ++r) {
    PIPEPLAN_ASSIGN_OR_RETURN(auto op, transport.Send(r, result_tag, bytes(values)));
    ops.push_back(std::move(op));
  }
  for (auto& op : ops) PIPEPLAN_RETURN_IF_ERROR(op->Wait(timeout));
  return absl::OkStatus();
}

}  // namespace pipeplan::worker
