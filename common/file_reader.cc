#include "pipeplan/common/file_reader.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace pipeplan::common {
namespace {

// Why `path` cannot be opened, as the contract's code.
absl::Status OpenError(const std::string& path, absl::string_view what, int err) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is a directory"));
  }
  if (err == ENOENT || err == ENOTDIR) {
    return absl::NotFoundError(absl::StrCat("cannot open ", what, " ", path, ": no such file"));
  }
  if (err == EACCES || err == EPERM) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", what, " ", path, ": permission denied"));
  }
  return absl::InternalError(
      absl::StrCat("cannot open ", what, " ", path, ": ", std::strerror(err)));
}

// Opens `path` at its end (so tellg() is its size); errors as the contract says.
absl::StatusOr<std::ifstream> OpenAtEnd(const std::string& path, absl::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return OpenError(path, what, EISDIR);
  errno = 0;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return OpenError(path, what, errno != 0 ? errno : ENOENT);
  return in;
}

template <typename Buffer>
absl::StatusOr<Buffer> ReadAll(const std::string& path, absl::string_view what) {
  absl::StatusOr<std::ifstream> in = OpenAtEnd(path, what);
  if (!in.ok()) return in.status();
  std::streamoff size = in->tellg();
  if (size < 0) return absl::InternalError(absl::StrCat("cannot size ", what, " ", path));
  Buffer buffer(static_cast<size_t>(size), '\0');
  in->seekg(0);
  if (size > 0 && !in->read(buffer.data(), static_cast<std::streamsize>(size))) {
    return absl::InternalError(absl::StrCat("reading ", what, " ", path, " failed"));
  }
  return buffer;
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path, absl::string_view what) {
  return ReadAll<std::string>(path, what);
}

absl::StatusOr<std::vector<char>> ReadFileBytes(const std::string& path, absl::string_view what) {
  return ReadAll<std::vector<char>>(path, what);
}

}  // namespace pipeplan::common
