#include "pipeplan/worker/package/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "pipeplan/common/file_reader.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/v1/model_package.pb.h"

namespace pipeplan::worker {
namespace {

namespace fs = std::filesystem;

constexpr char kFormatPrefix[] = "pipeplan-checkpoint/";
constexpr char kStepPrefix[] = "step_";

// A full disk is RESOURCE_EXHAUSTED (space may come back); anything else
// INTERNAL. The step loop goes on training after either.
absl::Status Errno(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(std::move(message));
  return absl::InternalError(std::move(message));
}

absl::Status WriteAll(int fd, std::span<const std::byte> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("writing", path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("opening directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : Errno("syncing directory", dir);
}

}  // namespace

std::string CheckpointDir(const std::string& root, int64_t step) {
  return absl::StrFormat("%s/%s%08d", root, kStepPrefix, step);
}

std::string ShardFileName(int rank) { return absl::StrCat("shard_", rank, ".bin"); }

absl::StatusOr<std::optional<std::string>> LatestCheckpoint(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return std::optional<std::string>();
  std::optional<std::string> best;
  int64_t best_step = -1;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    int64_t step = 0;
    if (name.rfind(kStepPrefix, 0) != 0 ||
        !absl::SimpleAtoi(name.substr(sizeof(kStepPrefix) - 1), &step)) {
      continue;
    }
    if (step > best_step && fs::exists(e.path() / kCheckpointManifestFile, ec)) {
      best_step = step;
      best = e.path().string();
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("listing ", root, ": ", ec.message()));
  return best;
}

absl::Status WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes) {
  const fs::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", dir, ": ", ec.message()));
  std::random_device rd;
  const std::string tmp = absl::StrCat(path, ".tmp-", ::getpid(), "-", rd());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("creating", tmp);
  absl::Status s = WriteAll(fd, bytes, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Errno("syncing", tmp);
  if (::close(fd) != 0 && s.ok()) s = Errno("closing", tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Errno("renaming to", path);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDir(dir);
}

absl::StatusOr<std::vector<char>> ReadFileBytes(const std::string& path) {
  // The one reader (one sized read: a shard is hundreds of MB).
  return common::ReadFileBytes(path, "checkpoint file");
}

absl::Status WriteCheckpointManifest(const std::string& dir, const CheckpointManifest& manifest) {
  v1::CheckpointManifest m;
  m.set_format(absl::StrCat(kFormatPrefix, manifest.format_version));
  m.set_step(manifest.meta.step);
  m.set_plan_version(manifest.meta.plan_version);
  m.set_data_position(manifest.meta.data_position);
  m.set_package_digest(manifest.package_digest);
  m.set_optimizer(manifest.optimizer);
  for (const CheckpointShardInfo& shard : manifest.shards) {
    v1::CheckpointShard* s = m.add_shards();
    s->set_file(shard.file);
    s->set_rank(shard.rank);
    for (const std::string& name : shard.parameters) s->add_parameters(name);
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(m, &json, options).ok()) {
    return absl::InternalError("cannot print the checkpoint manifest");
  }
  return WriteFileAtomically(absl::StrCat(dir, "/", kCheckpointManifestFile),
                             std::as_bytes(std::span<const char>(json.data(), json.size())));
}

absl::StatusOr<CheckpointManifest> ReadCheckpointManifest(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kCheckpointManifestFile);
  absl::StatusOr<std::string> read = common::ReadFileToString(path, "checkpoint manifest");
  if (read.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", dir, " has no ", kCheckpointManifestFile, " (incomplete)"));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(const std::string text, std::move(read));
  v1::CheckpointManifest m;
  google::protobuf::util::JsonParseOptions lenient;
  lenient.ignore_unknown_fields = true;  // a newer format may add fields
  if (!google::protobuf::util::JsonStringToMessage(text, &m, lenient).ok() ||
      m.format().rfind(kFormatPrefix, 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a checkpoint manifest (", kFormatPrefix, "N)"));
  }
  int version = 0;
  if (!absl::SimpleAtoi(m.format().substr(sizeof(kFormatPrefix) - 1), &version) || version < 1 ||
      version > kCheckpointFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", dir, " has format ", m.format(), "; this worker reads ",
                     kFormatPrefix, "1 to ", kFormatPrefix, kCheckpointFormatVersion));
  }
  CheckpointManifest out;
  out.format_version = version;
  out.meta = {m.step(), m.plan_version(), m.data_position()};
  out.package_digest = m.package_digest();
  out.optimizer = m.optimizer();
  for (const v1::CheckpointShard& s : m.shards()) {
    out.shards.push_back({s.file(), s.rank(),
                          std::vector<std::string>(s.parameters().begin(), s.parameters().end())});
  }
  return out;
}

}  // namespace pipeplan::worker
