#include "output_file.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace pipeplan::cli {

namespace fs = std::filesystem;

absl::Status WriteOutputFile(const std::string& path, absl::string_view text,
                             absl::string_view what) {
  const fs::path file(path);
  const fs::path folder = file.has_parent_path() ? file.parent_path() : fs::path(".");
  std::error_code ec;
  const fs::file_status folder_status = fs::status(folder, ec);
  if (!fs::exists(folder_status)) {
    return absl::NotFoundError(absl::StrCat("cannot write the ", what, " to ", path, ": folder ",
                                            folder.string(), " does not exist"));
  }
  if (!fs::is_directory(folder_status)) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write the ", what, " to ", path, ": ",
                                                      folder.string(), " is not a folder"));
  }
  if (fs::is_directory(fs::status(file, ec))) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write the ", what, " to ", path, ": it is a folder"));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write the ", what, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace pipeplan::cli
