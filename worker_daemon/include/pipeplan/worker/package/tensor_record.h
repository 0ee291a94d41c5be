// One parameter's training state as raw bytes: the wire and file format of
// state moves, peer snapshots and checkpoint shards (docs/snapshots.md).
//
//   header: "PPT1", tensor count, a label (the optimizer kind), and per
//           tensor its key ("param", "exp_avg", ...), dtype, element size,
//           shape and the offset of its bytes
//   data:   each tensor's bytes, contiguous, in the header's order, 64-byte
//           aligned (so a view of them is a valid tensor of its dtype)
//
// No pickling and no copy besides the one into the record: the torch
// executor lays the record out, writes the header and copies each tensor
// into its place (a GPU tensor straight to host memory); a reader takes
// views of the bytes. Torch-free: dtypes are the torch executor's numbers
// (c10::ScalarType) with their element sizes.
#ifndef PIPEPLAN_WORKER_TENSOR_RECORD_H_
#define PIPEPLAN_WORKER_TENSOR_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pipeplan::worker {

struct TensorMeta {
  std::string key;
  int32_t dtype = 0;
  int32_t element_size = 0;
  std::vector<int64_t> shape;

  // Elements times element size.
  uint64_t NumBytes() const;
};

struct RecordLayout {
  size_t total = 0;             // the whole record's bytes
  std::vector<size_t> offsets;  // of each tensor's bytes, from the record's start
};

// Where each tensor of `metas` goes in a record labelled `label`.
RecordLayout LayOutRecord(const std::string& label, const std::vector<TensorMeta>& metas);
// Writes the header into `out` (the record's first bytes; out.size() >=
// layout.total); the caller then copies each tensor to its offset.
void WriteRecordHeader(const std::string& label, const std::vector<TensorMeta>& metas,
                       const RecordLayout& layout, std::span<std::byte> out);

struct TensorSlice {
  TensorMeta meta;
  std::span<const std::byte> data;  // into the record
};

struct ParsedRecord {
  std::string label;
  std::vector<TensorSlice> tensors;
};

// The record's tensors as views into `record`. INVALID_ARGUMENT naming what
// is wrong when it is not a record (bad magic, a field past the end, sizes
// that do not add up).
absl::StatusOr<ParsedRecord> ParseRecord(std::span<const std::byte> record);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_TENSOR_RECORD_H_
