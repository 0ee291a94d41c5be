// TorchExecutor: checkpoint shards. Format 2 writes each rank's shard as a
// state pack of tensor records (one write, disk-bound); format 1 shards
// (torch.save'd dicts, pickled) still load.

#include <set>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/package/checkpoint.h"
#include "pipeplan/worker/transport/collectives.h"
#include "torch_executor_impl.h"

namespace pipeplan::worker {
namespace {

constexpr char kLegacyShardFormat[] = "pipeplan-checkpoint-shard/1";

using Dict = c10::impl::GenericDict;

// A format-1 entry {"param", "optimizer", "state": {"step", "exp_avg", ...}}.
absl::Status ImportLegacyEntry(TorchExecutor::Impl& impl, const std::string& name,
                               const torch::IValue& value, const std::string& source) {
  const std::string where = absl::StrCat(source, ": parameter \"", name, "\"");
  if (!value.isGenericDict()) return absl::InvalidArgumentError(where + " is not a dict");
  const Dict entry = value.toGenericDict();
  auto p = impl.params.find(name);
  if (p == impl.params.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is not held by rank ", impl.options.rank));
  }
  const std::string kind = entry.contains("optimizer") && entry.at("optimizer").isString()
                               ? entry.at("optimizer").toStringRef()
                               : "";
  if (kind != impl.OptimizerKind()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " carries ", kind, " optimizer state, this job uses ", impl.OptimizerKind()));
  }
  if (!entry.contains("param") || !entry.at("param").isTensor()) {
    return absl::InvalidArgumentError(where + ": no tensor \"param\"");
  }
  const torch::Tensor value_now = entry.at("param").toTensor();
  if (value_now.sizes() != p->second.sizes() ||
      value_now.scalar_type() != p->second.scalar_type()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"param\" has shape ", ShapeString(value_now.sizes()),
                     ", the parameter ", ShapeString(p->second.sizes())));
  }
  {
    torch::NoGradGuard no_grad;
    p->second.copy_(value_now);
  }
  if (!entry.contains("state") || !entry.at("state").isGenericDict()) {
    return absl::InvalidArgumentError(where + ": no \"state\" dict");
  }
  if (impl.optimizer == nullptr) return absl::OkStatus();
  OptimizerFields fields;
  for (const auto& kv : entry.at("state").toGenericDict()) {
    const std::string key = kv.key().toStringRef();
    if (key == "step" && kv.value().isInt()) fields.step = kv.value().toInt();
    if (kv.value().isTensor()) {
      const torch::Tensor t = kv.value().toTensor();
      if (t.sizes() != p->second.sizes() || t.scalar_type() != p->second.scalar_type()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": \"", key, "\" has shape ", ShapeString(t.sizes())));
      }
      fields.tensors[key] = t;
    }
  }
  return SetOptimizerFields(impl, p->second, fields, where);
}

absl::Status LoadLegacyShard(TorchExecutor::Impl& impl, const std::string& path,
                             const std::vector<std::string>& wanted) {
  PIPEPLAN_ASSIGN_OR_RETURN(const torch::IValue shard, LoadTorchSaved(path, "file"));
  if (!shard.isGenericDict() || !shard.toGenericDict().contains("parameters")) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a ", kLegacyShardFormat, " shard"));
  }
  const Dict params = shard.toGenericDict().at("parameters").toGenericDict();
  for (const std::string& name : wanted) {
    if (!params.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " lacks parameter \"", name, "\" its manifest lists"));
    }
    PIPEPLAN_RETURN_IF_ERROR(ImportLegacyEntry(impl, name, params.at(name), path));
  }
  return absl::OkStatus();
}

absl::Status LoadPackShard(TorchExecutor::Impl& impl, const std::string& path,
                           const std::vector<std::string>& wanted) {
  // One sized read; the records are imported from the read buffer.
  PIPEPLAN_ASSIGN_OR_RETURN(const std::vector<char> bytes, ReadFileBytes(path));
  const auto span = std::as_bytes(std::span<const char>(bytes.data(), bytes.size()));
  absl::StatusOr<NamedStateView> views = ParseStatePack(span);
  if (!views.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", views.status().message()));
  }
  for (const std::string& name : wanted) {
    auto it = views->find(name);
    if (it == views->end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " lacks parameter \"", name, "\" its manifest lists"));
    }
    PIPEPLAN_RETURN_IF_ERROR(ImportRecord(impl, name, it->second, path));
  }
  return absl::OkStatus();
}

absl::Status CheckManifestFits(const TorchExecutor::Impl& impl, const std::string& dir,
                               const CheckpointManifest& manifest) {
  if (manifest.package_digest != impl.options.package.digest) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", dir, " is of package ",
                                                   manifest.package_digest, ", the job's is ",
                                                   impl.options.package.digest));
  }
  if (manifest.optimizer != impl.OptimizerKind()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", dir, " holds ",
                                                   manifest.optimizer, " state, the job uses ",
                                                   impl.OptimizerKind()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TorchExecutor::WriteCheckpointShard(const std::string& dir,
                                                 const CheckpointMeta& meta) const {
  (void)meta;  // the manifest carries it
  StatePack pack;
  PIPEPLAN_RETURN_IF_ERROR(ExportRecords(*impl_, /*primary_only=*/true, pack));
  return WriteFileAtomically(absl::StrCat(dir, "/", ShardFileName(impl_->options.rank)),
                             pack.bytes);
}

absl::Status TorchExecutor::WriteCheckpoint(const std::string& dir, const CheckpointMeta& meta) {
  const Impl& impl = *impl_;
  const absl::Status shard = WriteCheckpointShard(dir, meta);
  Transport* t = impl.options.transport;
  const bool multi = t != nullptr && t->size() > 1;
  // Checkpoint barriers use epochs above any step's (24-bit epochs).
  const uint64_t epoch = static_cast<uint64_t>(meta.step) | (uint64_t{1} << 23);
  double failed[1] = {shard.ok() ? 0.0 : 1.0};
  if (multi) PIPEPLAN_RETURN_IF_ERROR(SumOverRanks(*t, failed, epoch, impl.options.comm_timeout));
  absl::Status manifest = absl::OkStatus();
  if (failed[0] == 0 && impl.options.rank == 0) {
    CheckpointManifest m;
    m.meta = meta;
    m.package_digest = impl.options.package.digest;
    m.optimizer = impl.OptimizerKind();
    for (int r = 0; r < impl.NumRanks(); ++r) {
      CheckpointShardInfo info{ShardFileName(r), r, {}};
      for (const auto& [name, ranks] : impl.owners) {
        if (ranks.front() == r) info.parameters.push_back(name);
      }
      m.shards.push_back(std::move(info));
    }
    manifest = WriteCheckpointManifest(dir, m);
  }
  double manifest_failed[1] = {manifest.ok() ? 0.0 : 1.0};
  if (multi) {
    PIPEPLAN_RETURN_IF_ERROR(SumOverRanks(*t, manifest_failed, epoch, impl.options.comm_timeout));
  }
  if (!shard.ok()) return shard;
  if (failed[0] > 0) {
    return absl::InternalError(
        absl::StrCat("checkpoint ", dir, ": ", failed[0], " rank(s) could not write their shard"));
  }
  if (!manifest.ok()) return manifest;
  if (manifest_failed[0] > 0) {
    return absl::InternalError(
        absl::StrCat("checkpoint ", dir, ": rank 0 could not write ", kCheckpointManifestFile));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointMeta> TorchExecutor::LoadCheckpoint(const std::string& dir) {
  Impl& impl = *impl_;
  PIPEPLAN_ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadCheckpointManifest(dir));
  PIPEPLAN_RETURN_IF_ERROR(CheckManifestFits(impl, dir, manifest));
  std::set<std::string> missing;
  for (const auto& [name, p] : impl.params) missing.insert(name);
  try {
    for (const CheckpointShardInfo& info : manifest.shards) {
      std::vector<std::string> wanted;
      for (const std::string& name : info.parameters) {
        if (missing.contains(name)) wanted.push_back(name);
      }
      if (wanted.empty()) continue;
      const std::string path = absl::StrCat(dir, "/", info.file);
      PIPEPLAN_RETURN_IF_ERROR(manifest.format_version == 1 ? LoadLegacyShard(impl, path, wanted)
                                                            : LoadPackShard(impl, path, wanted));
      for (const std::string& name : wanted) missing.erase(name);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("checkpoint ", dir, ": ", e.what_without_backtrace()));
  }
  if (!missing.empty()) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", dir, " has no parameter \"", *missing.begin(), "\""));
  }
  return manifest.meta;
}

}  // namespace pipeplan::worker
