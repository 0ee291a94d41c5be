// Where the CLI's picture files go (`--svg FILE`): one writer with the error
// contract of pipeplan/common/file_reader.h, so a caller (and the exit code)
// can tell a typo in the path from a file it may not write:
//   NOT_FOUND           the folder the file would go in does not exist
//   FAILED_PRECONDITION the path is a directory, or its folder is a file
//   PERMISSION_DENIED   the file cannot be written there
// Every message names what the file is (`what`, e.g. "SVG") and its path.
// Thread-safe; no state.
#ifndef PIPEPLAN_CLIENT_CLI_OUTPUT_FILE_H_
#define PIPEPLAN_CLIENT_CLI_OUTPUT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pipeplan::cli {

// Replaces `path` with `text`.
absl::Status WriteOutputFile(const std::string& path, absl::string_view text,
                             absl::string_view what);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_OUTPUT_FILE_H_
