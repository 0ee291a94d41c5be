// The one way pipeplan reads a whole file (a graph, a cluster, a TLS key, a
// model package's manifest, a checkpoint shard), with one error contract so a
// caller can decide by code:
//   NOT_FOUND          the path does not exist
//   PERMISSION_DENIED  it exists but this process may not read it
//   FAILED_PRECONDITION it is a directory (or otherwise not a regular file)
//   INTERNAL           the read failed part way (an I/O error)
// Every message names what the file is for (`what`, e.g. "graph") and its path.
// An empty file is not an error here: callers that need content say so.
// Thread-safe; no state.
#ifndef PIPEPLAN_COMMON_FILE_READER_H_
#define PIPEPLAN_COMMON_FILE_READER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pipeplan::common {

absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             absl::string_view what = "file");

// The same contract; one sized read, for large binary files (checkpoint
// shards are hundreds of MB, and stream iterators read at half the speed).
absl::StatusOr<std::vector<char>> ReadFileBytes(const std::string& path,
                                                absl::string_view what = "file");

}  // namespace pipeplan::common

#endif  // PIPEPLAN_COMMON_FILE_READER_H_
