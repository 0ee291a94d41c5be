// Checkpoint directories: layout, the MANIFEST that marks one complete, and
// atomic file writes (docs/model-package.md, "Checkpoints").
//
//   <root>/step_<8-digit step>/shard_<rank>.bin  one per rank (a state pack)
//   <root>/step_<8-digit step>/MANIFEST.json     written last, by rank 0
//
// Format 2 (MANIFEST "format": "pipeplan-checkpoint/2") stores each shard as
// a state pack (state_pack.h: raw tensor bytes, written with one write and
// read with one sized read). Format 1 shards (shard_<rank>.pt, torch.save
// dicts) still load; a manifest of any other format is FAILED_PRECONDITION
// naming it.
//
// A directory without MANIFEST.json is a checkpoint cut short (a crash while
// writing) and is never loaded. Torch-free: the shards themselves are written
// and read by the torch executor (torch_executor.h).
#ifndef PIPEPLAN_WORKER_CHECKPOINT_H_
#define PIPEPLAN_WORKER_CHECKPOINT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pipeplan::worker {

// Where training stands when a checkpoint is taken.
struct CheckpointMeta {
  int64_t step = 0;           // steps completed: training resumes with this step
  int64_t plan_version = 0;   // the plan those steps ran under
  int64_t data_position = 0;  // data rows consumed (step * batch size)
};

struct CheckpointShardInfo {
  std::string file;  // name inside the checkpoint directory
  int rank = 0;
  std::vector<std::string> parameters;  // canonical names the shard holds
};

inline constexpr int kCheckpointFormatVersion = 2;

struct CheckpointManifest {
  // 1: torch.save'd shards; 2: state packs. Written: always the newest.
  int format_version = kCheckpointFormatVersion;
  CheckpointMeta meta;
  std::string package_digest;
  std::string optimizer;  // "sgd", "adam", "adamw"
  std::vector<CheckpointShardInfo> shards;
};

inline constexpr char kCheckpointManifestFile[] = "MANIFEST.json";

// <root>/step_00000030.
std::string CheckpointDir(const std::string& root, int64_t step);
// shard_<rank>.bin (format 2).
std::string ShardFileName(int rank);

// The complete checkpoint (one with a MANIFEST) of the highest step under
// `root`; std::nullopt when there is none (or `root` does not exist).
absl::StatusOr<std::optional<std::string>> LatestCheckpoint(const std::string& root);

// MANIFEST.json of `dir`, written atomically. The caller makes sure every
// listed shard is written first (TorchExecutor::WriteCheckpoint: a barrier).
absl::Status WriteCheckpointManifest(const std::string& dir, const CheckpointManifest& manifest);
// NOT_FOUND when `dir` has no MANIFEST (an incomplete checkpoint);
// FAILED_PRECONDITION naming the format when it is neither format 1 nor 2;
// INVALID_ARGUMENT when it is not a manifest at all.
absl::StatusOr<CheckpointManifest> ReadCheckpointManifest(const std::string& dir);

// Writes `bytes` to a temporary file beside `path`, fsyncs it, renames it to
// `path` and fsyncs the directory: readers see the old file or the new one,
// never a part. Creates missing parent directories.
absl::Status WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes);
// The whole file in one read (chars: what LibTorch's pickle_load takes).
// NOT_FOUND when it cannot be opened, INTERNAL when a read fails.
absl::StatusOr<std::vector<char>> ReadFileBytes(const std::string& path);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_CHECKPOINT_H_
