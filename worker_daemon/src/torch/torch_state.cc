// TorchExecutor: parameters and optimizer state by canonical name — export
// and import (plan switches) and checkpoint shards.
#include <torch/csrc/jit/serialization/pickle.h>

#include <iterator>
#include <set>
#include <sstream>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/package/checkpoint.h"
#include "pipeplan/worker/transport/collectives.h"
#include "torch_executor_impl.h"

namespace pipeplan::worker {
namespace {

constexpr char kShardFormat[] = "pipeplan-checkpoint-shard/1";

using Dict = c10::impl::GenericDict;

Dict NewDict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

// torch::optim keys its state by the parameter's TensorImpl: a string of the
// pointer in LibTorch 1.x, the pointer itself in later versions.
template <typename Map>
typename Map::key_type StateKey(const Map&, const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;  // what c10::guts::to_string writes
    out << p.unsafeGetTensorImpl();
    return out.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

torch::Tensor Host(const torch::Tensor& t) { return t.detach().to(torch::kCPU); }

// {"step", "exp_avg", "exp_avg_sq"} (adam, adamw), {"momentum_buffer"}
// (sgd), or {} before the first update.
template <typename AdamState>
void PutAdamState(Dict& out, const torch::optim::OptimizerParamState* state) {
  auto* s = dynamic_cast<const AdamState*>(state);
  if (s == nullptr) return;
  out.insert("step", s->step());
  out.insert("exp_avg", Host(s->exp_avg()));
  out.insert("exp_avg_sq", Host(s->exp_avg_sq()));
  if (s->max_exp_avg_sq().defined()) out.insert("max_exp_avg_sq", Host(s->max_exp_avg_sq()));
}

Dict OptimizerState(const TorchExecutor::Impl& impl, const torch::Tensor& p) {
  Dict out = NewDict();
  const torch::optim::OptimizerParamState* state = impl.StateOf(p);
  if (state == nullptr) return out;
  const std::string kind = impl.OptimizerKind();
  if (kind == "adam") {
    PutAdamState<torch::optim::AdamParamState>(out, state);
  } else if (kind == "adamw") {
    PutAdamState<torch::optim::AdamWParamState>(out, state);
  } else if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state);
             s != nullptr && s->momentum_buffer().defined()) {
    out.insert("momentum_buffer", Host(s->momentum_buffer()));
  }
  return out;
}

Dict ParameterEntry(const TorchExecutor::Impl& impl, const std::string& name) {
  Dict entry = NewDict();
  const torch::Tensor& p = impl.params.at(name);
  entry.insert("param", Host(p));
  entry.insert("optimizer", impl.OptimizerKind());
  entry.insert("state", OptimizerState(impl, p));
  return entry;
}

absl::StatusOr<torch::Tensor> TensorField(const Dict& d, const std::string& key,
                                          const torch::Tensor& like, const std::string& where) {
  if (!d.contains(key) || !d.at(key).isTensor()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": no tensor \"", key, "\""));
  }
  const torch::Tensor t = d.at(key).toTensor();
  if (t.sizes() != like.sizes() || t.scalar_type() != like.scalar_type()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"", key, "\" has shape/dtype ", c10::str(t.sizes()), " ",
                     c10::toString(t.scalar_type()), ", the parameter is ", c10::str(like.sizes()),
                     " ", c10::toString(like.scalar_type())));
  }
  return t.to(like.device()).clone();
}

template <typename AdamState>
absl::Status SetAdamState(TorchExecutor::Impl& impl, const torch::Tensor& p, const Dict& s,
                          const std::string& where) {
  auto state = std::make_unique<AdamState>();
  if (!s.contains("step") || !s.at("step").isInt()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": no integer \"step\""));
  }
  state->step(s.at("step").toInt());
  PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor m, TensorField(s, "exp_avg", p, where));
  PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor v, TensorField(s, "exp_avg_sq", p, where));
  state->exp_avg(m);
  state->exp_avg_sq(v);
  if (s.contains("max_exp_avg_sq")) {
    PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor mx, TensorField(s, "max_exp_avg_sq", p, where));
    state->max_exp_avg_sq(mx);
  }
  auto& states = impl.optimizer->state();
  states[StateKey(states, p)] = std::move(state);
  return absl::OkStatus();
}

absl::Status SetOptimizerState(TorchExecutor::Impl& impl, const torch::Tensor& p, const Dict& s,
                               const std::string& where) {
  auto& states = impl.optimizer->state();
  states.erase(StateKey(states, p));
  if (s.size() == 0) return absl::OkStatus();  // saved before its first update
  const std::string kind = impl.OptimizerKind();
  if (kind == "adam") return SetAdamState<torch::optim::AdamParamState>(impl, p, s, where);
  if (kind == "adamw") return SetAdamState<torch::optim::AdamWParamState>(impl, p, s, where);
  if (s.contains("momentum_buffer")) {
    PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor buf, TensorField(s, "momentum_buffer", p, where));
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(buf);
    states[StateKey(states, p)] = std::move(state);
  }
  return absl::OkStatus();
}

// Overwrites parameter `name` and its optimizer state from an entry
// {"param", "optimizer", "state"}.
absl::Status ImportEntry(TorchExecutor::Impl& impl, const std::string& name,
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
  PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor value_now, TensorField(entry, "param", p->second, where));
  {
    torch::NoGradGuard no_grad;
    p->second.copy_(value_now);
  }
  if (!entry.contains("state") || !entry.at("state").isGenericDict()) {
    return absl::InvalidArgumentError(where + ": no \"state\" dict");
  }
  if (impl.optimizer == nullptr) return absl::OkStatus();
  return SetOptimizerState(impl, p->second, entry.at("state").toGenericDict(), where);
}

absl::StatusOr<torch::IValue> LoadPickleFile(const std::string& path) {
  PIPEPLAN_ASSIGN_OR_RETURN(const std::vector<char> bytes, ReadFileBytes(path));
  try {
    return torch::jit::pickle_load(bytes);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a torch.save'd file: ", e.what_without_backtrace()));
  }
}

std::span<const std::byte> AsBytes(const std::vector<char>& v) {
  return std::as_bytes(std::span<const char>(v.data(), v.size()));
}

}  // namespace

torch::optim::OptimizerParamState* TorchExecutor::Impl::StateOf(const torch::Tensor& p) const {
  if (optimizer == nullptr) return nullptr;
  auto& states = optimizer->state();
  auto it = states.find(StateKey(states, p));
  return it == states.end() ? nullptr : it->second.get();
}

absl::StatusOr<NamedState> TorchExecutor::ExportState() const {
  NamedState out;
  try {
    for (const auto& [name, p] : impl_->params) {
      const std::vector<char> bytes = torch::jit::pickle_save(ParameterEntry(*impl_, name));
      const auto span = AsBytes(bytes);
      out[name].assign(span.begin(), span.end());
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("exporting state: ", e.what_without_backtrace()));
  }
  return out;
}

absl::Status TorchExecutor::ImportState(const NamedState& state, bool complete) {
  for (const auto& [name, blob] : state) {
    torch::IValue value;
    try {
      const auto* chars = reinterpret_cast<const char*>(blob.data());
      value = torch::jit::pickle_load(std::vector<char>(chars, chars + blob.size()));
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state of parameter \"", name, "\" is unreadable: ", e.what_without_backtrace()));
    }
    PIPEPLAN_RETURN_IF_ERROR(ImportEntry(*impl_, name, value, "imported state"));
  }
  if (complete) {
    for (const auto& [name, p] : impl_->params) {
      if (!state.contains(name)) {
        return absl::FailedPreconditionError(absl::StrCat("imported state lacks parameter \"", name,
                                                          "\" of rank ", impl_->options.rank));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TorchExecutor::WriteCheckpointShard(const std::string& dir,
                                                 const CheckpointMeta& meta) const {
  const Impl& impl = *impl_;
  std::vector<char> bytes;
  try {
    Dict shard = NewDict();
    shard.insert("format", std::string(kShardFormat));
    shard.insert("rank", static_cast<int64_t>(impl.options.rank));
    shard.insert("step", meta.step);
    shard.insert("plan_version", meta.plan_version);
    shard.insert("data_position", meta.data_position);
    shard.insert("package_digest", impl.options.package.digest);
    shard.insert("optimizer", impl.OptimizerKind());
    Dict params = NewDict();
    for (const auto& [name, p] : impl.params) {
      if (impl.IsPrimaryOwner(name)) params.insert(name, ParameterEntry(impl, name));
    }
    shard.insert("parameters", params);
    bytes = torch::jit::pickle_save(shard);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("checkpoint shard: ", e.what_without_backtrace()));
  }
  return WriteFileAtomically(absl::StrCat(dir, "/", ShardFileName(impl.options.rank)),
                             AsBytes(bytes));
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
  std::set<std::string> missing;
  for (const auto& [name, p] : impl.params) missing.insert(name);
  for (const CheckpointShardInfo& info : manifest.shards) {
    std::vector<std::string> wanted;
    for (const std::string& name : info.parameters) {
      if (missing.contains(name)) wanted.push_back(name);
    }
    if (wanted.empty()) continue;
    const std::string path = absl::StrCat(dir, "/", info.file);
    PIPEPLAN_ASSIGN_OR_RETURN(torch::IValue shard, LoadPickleFile(path));
    if (!shard.isGenericDict() || !shard.toGenericDict().contains("parameters")) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a ", kShardFormat, " shard"));
    }
    const Dict params = shard.toGenericDict().at("parameters").toGenericDict();
    for (const std::string& name : wanted) {
      if (!params.contains(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " lacks parameter \"", name, "\" its manifest lists"));
      }
      PIPEPLAN_RETURN_IF_ERROR(ImportEntry(impl, name, params.at(name), path));
      missing.erase(name);
    }
  }
  if (!missing.empty()) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", dir, " has no parameter \"", *missing.begin(), "\""));
  }
  return manifest.meta;
}

}  // namespace pipeplan::worker
