// TorchExecutor: parameters and optimizer state by canonical name as tensor
// records (package/tensor_record.h): export and import for plan switches,
// peer snapshots and checkpoint shards. One copy per tensor, straight from
// the tensor (on any device) into the record's host bytes; no pickling.
#include <cstring>
#include <sstream>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/package/tensor_record.h"
#include "torch_executor_impl.h"

namespace pipeplan::worker {
namespace {

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

using Fields = std::vector<std::pair<std::string, torch::Tensor>>;

// {"step", "exp_avg", "exp_avg_sq"[, "max_exp_avg_sq"]} (adam, adamw),
// {"momentum_buffer"} (sgd), or {} before the first update.
template <typename AdamState>
void PutAdamFields(Fields& out, const torch::optim::OptimizerParamState* state) {
  auto* s = dynamic_cast<const AdamState*>(state);
  if (s == nullptr) return;
  out.emplace_back("step", torch::tensor(s->step(), torch::kLong));
  out.emplace_back("exp_avg", s->exp_avg());
  out.emplace_back("exp_avg_sq", s->exp_avg_sq());
  if (s->max_exp_avg_sq().defined()) out.emplace_back("max_exp_avg_sq", s->max_exp_avg_sq());
}

// The parameter and its optimizer state, as they are (any device).
Fields ParameterFields(const TorchExecutor::Impl& impl, const std::string& name) {
  const torch::Tensor& p = impl.params.at(name);
  Fields out = {{"param", p.detach()}};
  const torch::optim::OptimizerParamState* state = impl.StateOf(p);
  if (state == nullptr) return out;
  const std::string kind = impl.OptimizerKind();
  if (kind == "adam") {
    PutAdamFields<torch::optim::AdamParamState>(out, state);
  } else if (kind == "adamw") {
    PutAdamFields<torch::optim::AdamWParamState>(out, state);
  } else if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state);
             s != nullptr && s->momentum_buffer().defined()) {
    out.emplace_back("momentum_buffer", s->momentum_buffer());
  }
  return out;
}

std::vector<TensorMeta> Metas(const Fields& fields) {
  std::vector<TensorMeta> metas;
  for (const auto& [key, t] : fields) {
    metas.push_back({key, static_cast<int32_t>(t.scalar_type()),
                     static_cast<int32_t>(t.element_size()),
                     std::vector<int64_t>(t.sizes().begin(), t.sizes().end())});
  }
  return metas;
}

// Copies `fields` into `out` (RecordSize bytes) as a tensor record.
void FillRecord(const std::string& label, const Fields& fields, std::span<std::byte> out) {
  const std::vector<TensorMeta> metas = Metas(fields);
  const RecordLayout layout = LayOutRecord(label, metas);
  WriteRecordHeader(label, metas, layout, out);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < fields.size(); ++i) {
    const torch::Tensor& t = fields[i].second;
    if (t.numel() == 0) continue;
    torch::from_blob(out.data() + layout.offsets[i], t.sizes(),
                     torch::TensorOptions().dtype(t.scalar_type()))
        .copy_(t);
  }
}

size_t RecordSize(const std::string& label, const Fields& fields) {
  return LayOutRecord(label, Metas(fields)).total;
}

// A view of a record's tensor as a (host) tensor; checked against `like`.
absl::StatusOr<torch::Tensor> SliceTensor(const TensorSlice& s, const torch::Tensor& like,
                                          const std::string& where) {
  const auto type = static_cast<c10::ScalarType>(s.meta.dtype);
  if (type != like.scalar_type() || s.meta.element_size != like.element_size() ||
      torch::IntArrayRef(s.meta.shape) != like.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", s.meta.key, "\" has shape/dtype ",
                                                   ShapeString(s.meta.shape), " ", s.meta.dtype,
                                                   ", the parameter is ", ShapeString(like.sizes()),
                                                   " ", c10::toString(like.scalar_type())));
  }
  return torch::from_blob(const_cast<std::byte*>(s.data.data()), like.sizes(),
                          torch::TensorOptions().dtype(type));
}

}  // namespace

torch::optim::OptimizerParamState* TorchExecutor::Impl::StateOf(const torch::Tensor& p) const {
  if (optimizer == nullptr) return nullptr;
  auto& states = optimizer->state();
  auto it = states.find(StateKey(states, p));
  return it == states.end() ? nullptr : it->second.get();
}

absl::Status SetOptimizerFields(TorchExecutor::Impl& impl, const torch::Tensor& p,
                                const OptimizerFields& f, const std::string& where) {
  auto& states = impl.optimizer->state();
  states.erase(StateKey(states, p));
  if (f.tensors.empty() && !f.step) return absl::OkStatus();  // saved before its first update
  // An owning copy on the parameter's device (the field may view a buffer).
  auto field = [&](const std::string& key) -> absl::StatusOr<torch::Tensor> {
    auto it = f.tensors.find(key);
    if (it == f.tensors.end())
      return absl::InvalidArgumentError(absl::StrCat(where, ": no \"", key, "\""));
    return it->second.to(p.device(), /*non_blocking=*/false, /*copy=*/true);
  };
  const std::string kind = impl.OptimizerKind();
  if (kind == "adam" || kind == "adamw") {
    if (!f.step) return absl::InvalidArgumentError(absl::StrCat(where, ": no integer \"step\""));
    std::unique_ptr<torch::optim::OptimizerParamState> state;
    auto fill = [&](auto s) -> absl::Status {
      s->step(*f.step);
      PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor m, field("exp_avg"));
      PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor v, field("exp_avg_sq"));
      s->exp_avg(m);
      s->exp_avg_sq(v);
      if (f.tensors.contains("max_exp_avg_sq")) {
        PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor mx, field("max_exp_avg_sq"));
        s->max_exp_avg_sq(mx);
      }
      state = std::move(s);
      return absl::OkStatus();
    };
    PIPEPLAN_RETURN_IF_ERROR(kind == "adam"
                                 ? fill(std::make_unique<torch::optim::AdamParamState>())
                                 : fill(std::make_unique<torch::optim::AdamWParamState>()));
    states[StateKey(states, p)] = std::move(state);
  } else if (f.tensors.contains("momentum_buffer")) {
    PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor buf, field("momentum_buffer"));
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(buf);
    states[StateKey(states, p)] = std::move(state);
  }
  return absl::OkStatus();
}

absl::Status ImportRecord(TorchExecutor::Impl& impl, const std::string& name,
                          std::span<const std::byte> record, const std::string& source) {
  const std::string where = absl::StrCat(source, ": parameter \"", name, "\"");
  auto p = impl.params.find(name);
  if (p == impl.params.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is not held by rank ", impl.options.rank));
  }
  absl::StatusOr<ParsedRecord> parsed = ParseRecord(record);
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
  if (parsed->label != impl.OptimizerKind()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " carries ", parsed->label,
                                                   " optimizer state, this job uses ",
                                                   impl.OptimizerKind()));
  }
  OptimizerFields fields;
  bool have_param = false;
  for (const TensorSlice& s : parsed->tensors) {
    if (s.meta.key == "step") {
      if (s.data.size() != sizeof(int64_t))
        return absl::InvalidArgumentError(where + ": bad \"step\"");
      int64_t step = 0;
      std::memcpy(&step, s.data.data(), sizeof(step));
      fields.step = step;
      continue;
    }
    PIPEPLAN_ASSIGN_OR_RETURN(torch::Tensor t, SliceTensor(s, p->second, where));
    if (s.meta.key == "param") {
      torch::NoGradGuard no_grad;
      p->second.copy_(t);
      have_param = true;
    } else {
      fields.tensors[s.meta.key] = t;
    }
  }
  if (!have_param) return absl::InvalidArgumentError(where + ": no tensor \"param\"");
  if (impl.optimizer == nullptr) return absl::OkStatus();
  return SetOptimizerFields(impl, p->second, fields, where);
}

absl::Status ExportRecords(const TorchExecutor::Impl& impl, bool primary_only, StatePack& pack) {
  try {
    std::map<std::string, Fields> fields;
    std::map<std::string, size_t> sizes;
    for (const auto& [name, p] : impl.params) {
      if (primary_only && !impl.IsPrimaryOwner(name)) continue;
      fields[name] = ParameterFields(impl, name);
      sizes[name] = RecordSize(impl.OptimizerKind(), fields[name]);
    }
    for (auto& [name, blob] : StartPack(sizes, pack)) {
      FillRecord(impl.OptimizerKind(), fields.at(name), blob);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("exporting state: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::StatusOr<NamedState> TorchExecutor::ExportState() const {
  StatePack pack;
  PIPEPLAN_RETURN_IF_ERROR(ExportRecords(*impl_, /*primary_only=*/false, pack));
  NamedState out;
  for (const auto& [name, view] : pack.views) out[name].assign(view.begin(), view.end());
  return out;
}

absl::Status TorchExecutor::ExportPack(StatePack& into) const {
  return ExportRecords(*impl_, /*primary_only=*/false, into);
}

absl::StatusOr<size_t> TorchExecutor::PackBytes() const {
  try {
    std::map<std::string, size_t> sizes;
    for (const auto& [name, p] : impl_->params) {
      sizes[name] = RecordSize(impl_->OptimizerKind(), ParameterFields(*impl_, name));
    }
    return PackSize(sizes);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("sizing state: ", e.what_without_backtrace()));
  }
}

absl::Status TorchExecutor::ImportState(const NamedStateView& state, bool complete) {
  try {
    for (const auto& [name, blob] : state) {
      PIPEPLAN_RETURN_IF_ERROR(ImportRecord(*impl_, name, blob, "imported state"));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("importing state: ", e.what_without_backtrace()));
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

absl::Status TorchExecutor::ImportState(const NamedState& state, bool complete) {
  return ImportState(ViewsOf(state), complete);
}

}  // namespace pipeplan::worker
