// Named blobs (a tensor record per parameter, tensor_record.h) in one
// contiguous buffer: a rank's whole state as a peer snapshot holds it and a
// checkpoint shard stores it (docs/snapshots.md).
//
//   header: "PPSTATE1", count, header size, per blob its name, offset, size
//   blobs:  64-byte aligned, in name order
//
// A pack is built in place: StartPack sizes the buffer (reusing its memory
// when the size is unchanged, as every snapshot round of a version is) and
// writes the header; the caller fills each blob's span. Readers take views.
#ifndef PIPEPLAN_WORKER_STATE_PACK_H_
#define PIPEPLAN_WORKER_STATE_PACK_H_

#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pipeplan::worker {

// Canonical parameter name -> its record, in memory someone else owns.
using NamedStateView = std::map<std::string, std::span<const std::byte>>;

struct StatePack {
  StatePack() = default;
  StatePack(const StatePack&) = delete;
  StatePack& operator=(const StatePack&) = delete;
  StatePack(StatePack&&) = default;
  StatePack& operator=(StatePack&&) = default;

  std::vector<std::byte> bytes;
  NamedStateView views;  // into `bytes`
};

// Lays out blobs of `sizes` (name -> bytes) in `pack`, writes the header and
// returns each blob's span to fill (pack.views then point at the same
// places).
std::map<std::string, std::span<std::byte>> StartPack(const std::map<std::string, size_t>& sizes,
                                                      StatePack& pack);

// The bytes StartPack would size a pack of `sizes` to.
size_t PackSize(const std::map<std::string, size_t>& sizes);

// The blobs of a pack as views into `bytes`. INVALID_ARGUMENT when `bytes`
// is not a pack or a blob runs past its end.
absl::StatusOr<NamedStateView> ParseStatePack(std::span<const std::byte> bytes);

// True when `bytes` starts like a pack (a quick check for a file's format).
bool LooksLikeStatePack(std::span<const std::byte> bytes);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_STATE_PACK_H_
