#include "pipeplan/worker/transport/collectives.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "pipeplan/common/status_macros.h"

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

namespace {

// Chunk c of n of a buffer of `len` values: [begin, end).
std::pair<size_t, size_t> Chunk(size_t len, int n, int c) {
  return {len * c / n, len * (c + 1) / n};
}

// One ring step: sends chunk `send_chunk` to the next rank and receives the
// previous rank's chunk `recv_chunk` into `scratch`; then adds it into
// `values` (reduce-scatter) or copies it there (all-gather).
template <typename T>
absl::Status RingStep(Transport& t, std::span<T> values, std::vector<T>& scratch, int send_chunk,
                      int recv_chunk, bool add, uint64_t tag, absl::Duration timeout) {
  const int n = t.size();
  const auto [sb, se] = Chunk(values.size(), n, send_chunk);
  const auto [rb, re] = Chunk(values.size(), n, recv_chunk);
  std::span<T> in(scratch.data(), re - rb);
  PIPEPLAN_ASSIGN_OR_RETURN(auto recv,
                            t.Recv((t.rank() + n - 1) % n, tag, std::as_writable_bytes(in)));
  PIPEPLAN_ASSIGN_OR_RETURN(
      auto send, t.Send((t.rank() + 1) % n, tag, std::as_bytes(values.subspan(sb, se - sb))));
  PIPEPLAN_RETURN_IF_ERROR(recv->Wait(timeout));
  PIPEPLAN_RETURN_IF_ERROR(send->Wait(timeout));
  for (size_t i = 0; i < in.size(); ++i) {
    values[rb + i] = add ? values[rb + i] + in[i] : in[i];
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status RingSum(Transport& t, std::span<T> values, uint64_t epoch, absl::Duration timeout,
                     uint32_t call) {
  const int n = t.size();
  if (n == 1 || values.empty()) return absl::OkStatus();
  std::vector<T> scratch(values.size() / n + 1);
  const int me = t.rank();
  uint64_t index = uint64_t{call} << 16;
  // After step k of the reduce-scatter, chunk (me - k - 1) holds k + 2
  // ranks' values; after n - 1 steps rank me holds chunk (me + 1) summed.
  for (int k = 0; k < n - 1; ++k) {
    PIPEPLAN_RETURN_IF_ERROR(RingStep(t, values, scratch, (me - k + n) % n,
                                      (me - k - 1 + 2 * n) % n, /*add=*/true,
                                      ExecutorTag(TagPurpose::kRingSum, epoch, index++), timeout));
  }
  for (int k = 0; k < n - 1; ++k) {
    PIPEPLAN_RETURN_IF_ERROR(RingStep(t, values, scratch, (me + 1 - k + n) % n, (me - k + n) % n,
                                      /*add=*/false,
                                      ExecutorTag(TagPurpose::kRingSum, epoch, index++), timeout));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RingAllReduceSum(Transport& transport, std::span<float> values, uint64_t epoch,
                              absl::Duration timeout, uint32_t call) {
  return RingSum(transport, values, epoch, timeout, call);
}

absl::Status RingAllReduceSum(Transport& transport, std::span<double> values, uint64_t epoch,
                              absl::Duration timeout, uint32_t call) {
  return RingSum(transport, values, epoch, timeout, call);
}

}  // namespace pipeplan::worker
