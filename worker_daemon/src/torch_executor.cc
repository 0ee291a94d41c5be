// TorchExecutor: loading stages, F/I/W/B, boundary buffers and the step's
// update. State export/import and checkpoints are in torch_state.cc.
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <iterator>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/checkpoint.h"
#include "pipeplan/worker/collectives.h"
#include "torch_executor_impl.h"

namespace pipeplan::worker {
namespace {

using schedule::Action;
using schedule::ActionType;

std::string Where(int stage, int m) { return absl::StrCat("stage ", stage, " microbatch ", m); }

absl::Status TorchError(const std::string& what, const c10::Error& e) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
}

std::string ShapeString(torch::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Raw bytes of `t` (contiguous, host order) as a flat uint8 view.
torch::Tensor ByteView(const torch::Tensor& t) {
  return t.contiguous().reshape({-1}).view(torch::kUInt8);
}

// One host buffer with the bytes of `tensors` concatenated (the wire layout).
torch::Tensor Pack(const std::vector<torch::Tensor>& tensors) {
  int64_t total = 0;
  for (const torch::Tensor& t : tensors) total += t.numel() * t.element_size();
  torch::Tensor buffer = torch::empty({total}, torch::kUInt8);
  int64_t offset = 0;
  for (const torch::Tensor& t : tensors) {
    const int64_t n = t.numel() * t.element_size();
    if (n > 0) buffer.narrow(0, offset, n).copy_(ByteView(t));
    offset += n;
  }
  return buffer;
}

// The tensors of `specs` (only the requires_grad ones when `gradients`) out
// of a received host buffer, on `device`.
std::vector<torch::Tensor> Unpack(const torch::Tensor& buffer, const std::vector<TensorSpec>& specs,
                                  bool gradients, torch::Device device) {
  std::vector<torch::Tensor> out;
  int64_t offset = 0;
  for (const TensorSpec& spec : specs) {
    if (gradients && !spec.requires_grad) continue;
    torch::Tensor t = torch::empty(spec.shape, torch::dtype(*ScalarTypeOf(spec.dtype)));
    const int64_t n = t.numel() * t.element_size();
    if (n > 0) t.reshape({-1}).view(torch::kUInt8).copy_(buffer.narrow(0, offset, n));
    offset += n;
    out.push_back(t.to(device));
  }
  return out;
}

std::span<std::byte> Span(const torch::Tensor& buffer) {
  return {static_cast<std::byte*>(buffer.data_ptr()), static_cast<size_t>(buffer.numel())};
}

absl::Status CheckOutputs(const std::vector<torch::Tensor>& outputs, const CompiledStage& spec,
                          int m) {
  if (outputs.size() != spec.outputs.size()) {
    return absl::InternalError(absl::StrCat(Where(spec.index, m), ": the module returned ",
                                            outputs.size(), " tensors, stages.json lists ",
                                            spec.outputs.size()));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorSpec& want = spec.outputs[i];
    if (outputs[i].sizes() != torch::IntArrayRef(want.shape) ||
        DTypeName(outputs[i].scalar_type()) != want.dtype) {
      return absl::InternalError(
          absl::StrCat(Where(spec.index, m), ": output \"", want.name, "\" is ",
                       DTypeName(outputs[i].scalar_type()), ShapeString(outputs[i].sizes()),
                       ", stages.json says ", want.dtype, ShapeString(want.shape)));
    }
  }
  return absl::OkStatus();
}

std::vector<torch::Tensor> Flatten(const torch::IValue& v) {
  std::vector<torch::Tensor> out;
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const torch::IValue& x : v.toTupleRef().elements()) out.push_back(x.toTensor());
  } else if (v.isTensorList()) {
    for (const torch::Tensor& x : v.toTensorVector()) out.push_back(x);
  } else if (v.isList()) {
    for (const torch::IValue& x : v.toListRef()) out.push_back(x.toTensor());
  }
  return out;
}

int64_t Bytes(const torch::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

}  // namespace

// ---------------------------------------------------------------------------
// Loading

int TorchExecutor::Impl::NumRanks() const {
  return *std::max_element(options.stage_to_rank.begin(), options.stage_to_rank.end()) + 1;
}

bool TorchExecutor::Impl::IsPrimaryOwner(const std::string& name) const {
  auto it = owners.find(name);
  return it != owners.end() && it->second.front() == options.rank;
}

namespace {

absl::Status CheckOptions(const TorchExecutorOptions& o) {
  const int p = o.stages.num_stages();
  if (static_cast<int>(o.stage_to_rank.size()) != p || p == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the plan places ", o.stage_to_rank.size(),
                                                   " stages, the compiled stages have ", p));
  }
  if (std::find(o.stage_to_rank.begin(), o.stage_to_rank.end(), o.rank) == o.stage_to_rank.end()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", o.rank, " holds no stage"));
  }
  if (o.num_microbatches < 1) {
    return absl::InvalidArgumentError("num_microbatches must be >= 1");
  }
  if (o.num_replicas < 1 || o.replica < 0 || o.replica >= o.num_replicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica ", o.replica, " is not one of ", o.num_replicas));
  }
  if (o.num_replicas > 1 &&
      (o.replica_group == nullptr || o.replica_group->size() != o.num_replicas ||
       o.replica_group->rank() != o.replica)) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica ", o.replica, " of ", o.num_replicas,
                     " needs a replica group transport of that size with that rank"));
  }
  if (!o.stages.package_digest.empty() && o.stages.package_digest != o.package.digest) {
    return absl::InvalidArgumentError(absl::StrCat("the compiled stages in ", o.stages.dir,
                                                   " are for package ", o.stages.package_digest,
                                                   ", not ", o.package.digest));
  }
  const std::string& kind = o.optimizer.kind;
  if (kind != "sgd" && kind != "adam" && kind != "adamw") {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer \"", kind, "\": use sgd, adam or adamw"));
  }
  if (!(o.optimizer.lr > 0)) return absl::InvalidArgumentError("the learning rate must be > 0");
  if (o.dtype != "float32" && o.dtype != "float64") {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype \"", o.dtype, "\": use float32 or float64"));
  }
  return absl::OkStatus();
}

// Training in float64: the floating tensors that cross a boundary, and the
// initial parameters, become float64 (the stages' modules are converted as
// they load).
void ConvertToFloat64(CompiledStages& stages, std::map<std::string, torch::Tensor>& initial) {
  for (CompiledStage& stage : stages.stages) {
    for (auto* list : {&stage.inputs, &stage.outputs}) {
      for (TensorSpec& t : *list) {
        if (IsFloatingDType(t.dtype)) t.dtype = "float64";
      }
    }
  }
  for (auto& [name, t] : initial) {
    if (t.is_floating_point()) t = t.to(torch::kFloat64);
  }
}

absl::StatusOr<std::map<std::string, torch::Tensor>> LoadInitialParameters(
    const ModelPackage& package) {
  const std::string path = package.ParamsPath();
  PIPEPLAN_ASSIGN_OR_RETURN(const std::vector<char> bytes, ReadFileBytes(path));
  std::map<std::string, torch::Tensor> out;
  try {
    const torch::IValue v = torch::jit::pickle_load(bytes);
    if (!v.isGenericDict()) throw c10::Error("not a dict", "");
    for (const auto& kv : v.toGenericDict()) {
      if (kv.key().isString() && kv.value().isTensor()) {
        out[kv.key().toStringRef()] = kv.value().toTensor();
      }
    }
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a torch.save'd dict of tensors: ", e.what_without_backtrace()));
  }
  for (const TensorSpec& p : package.parameters) {
    auto it = out.find(p.name);
    if (it == out.end()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " lacks parameter \"", p.name, "\""));
    }
    if (it->second.sizes() != torch::IntArrayRef(p.shape) ||
        DTypeName(it->second.scalar_type()) != p.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": parameter \"", p.name, "\" is ", DTypeName(it->second.scalar_type()),
          ShapeString(it->second.sizes()), ", manifest.json says ", p.dtype, ShapeString(p.shape)));
    }
  }
  return out;
}

// Sets the parameter at `path` ("a.b.weight") of a scripted module.
void SetParameter(torch::jit::Module module, const std::string& path, const torch::Tensor& value) {
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i + 1 < parts.size(); ++i) module = module.attr(parts[i]).toModule();
  module.register_parameter(parts.back(), value, /*is_buffer=*/false);
}

}  // namespace

// Loads stage `s` and points every parameter slot of its module at this
// rank's canonical tensor, so tied slots share one tensor (and one .grad).
static absl::Status LoadStage(TorchExecutor::Impl& impl, int s,
                              const std::map<std::string, torch::Tensor>& initial) {
  const CompiledStage& spec = impl.options.stages.stages[s];
  const std::string path = impl.options.stages.StagePath(s);
  LocalStage stage;
  stage.spec = &spec;
  try {
    stage.module = torch::jit::load(path, impl.device);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load stage ", s, " from ", path, ": ", e.what_without_backtrace()));
  }
  stage.module.train(true);
  if (impl.options.dtype == "float64") stage.module.to(torch::kFloat64);
  std::map<std::string, std::string> name_of;  // path -> canonical name
  for (const StageParameter& p : spec.parameters) name_of[p.path] = p.name;
  // Slots that alias a listed one (a tied parameter seen under a second path).
  std::map<const void*, std::string> name_of_storage;
  std::vector<std::pair<std::string, torch::Tensor>> slots;
  for (const auto& p : stage.module.named_parameters(/*recurse=*/true)) {
    slots.emplace_back(p.name, p.value);
    if (name_of.contains(p.name)) name_of_storage[p.value.data_ptr()] = name_of[p.name];
  }
  std::set<std::string> seen;
  for (const auto& [slot, value] : slots) {
    std::string name;
    if (auto it = name_of.find(slot); it != name_of.end()) {
      name = it->second;
    } else if (auto jt = name_of_storage.find(value.data_ptr()); jt != name_of_storage.end()) {
      name = jt->second;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": parameter \"", slot, "\" is not listed in stages.json"));
    }
    seen.insert(slot);
    auto init = initial.find(name);
    if (init == initial.end()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": parameter \"", slot, "\" is \"", name,
                                                     "\", which the package lacks"));
    }
    if (init->second.sizes() != value.sizes() ||
        init->second.scalar_type() != value.scalar_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": parameter \"", slot, "\" is ", ShapeString(value.sizes()),
                       ", package's \"", name, "\" is ", ShapeString(init->second.sizes())));
    }
    torch::Tensor& canonical = impl.params[name];
    if (!canonical.defined()) {
      canonical = init->second.detach().to(impl.device).clone().set_requires_grad(true);
    }
    SetParameter(stage.module, slot, canonical);
    stage.params[name] = canonical;
  }
  for (const StageParameter& p : spec.parameters) {
    if (!seen.contains(p.path)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " has no parameter \"", p.path, "\" that stages.json lists for \"", p.name, "\""));
    }
  }
  impl.stages.emplace(s, std::move(stage));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerOptions& o, const std::map<std::string, torch::Tensor>& params) {
  std::vector<torch::Tensor> list;
  for (const auto& [name, p] : params) list.push_back(p);
  if (o.kind == "sgd") {
    return std::unique_ptr<torch::optim::Optimizer>(
        new torch::optim::SGD(list, torch::optim::SGDOptions(o.lr)
                                        .momentum(o.momentum)
                                        .weight_decay(o.weight_decay.value_or(0))));
  }
  if (o.kind == "adam") {
    return std::unique_ptr<torch::optim::Optimizer>(new torch::optim::Adam(
        list, torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay.value_or(0))));
  }
  if (o.kind == "adamw") {
    return std::unique_ptr<torch::optim::Optimizer>(new torch::optim::AdamW(
        list, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay.value_or(0.01))));
  }
  return absl::InvalidArgumentError(absl::StrCat("optimizer \"", o.kind, "\""));
}

static absl::Status OpenData(TorchExecutor::Impl& impl) {
  const TorchExecutorOptions& o = impl.options;
  if (!impl.IsLocal(0) && !impl.IsLocal(impl.last_stage)) return absl::OkStatus();
  for (const TensorSpec& in : o.stages.stages[0].inputs) {
    bool known = false;
    for (const TensorSpec& p : o.package.inputs) known = known || p.name == in.name;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage 0 takes \"", in.name, "\", which is not an input of the model package"));
    }
  }
  if (o.stages.stages[impl.last_stage].outputs.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the last stage returns ",
                                                   o.stages.stages[impl.last_stage].outputs.size(),
                                                   " tensors; the loss needs one"));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(
      TrainingData data,
      TrainingData::Open(o.data, o.package, impl.loss,
                         o.stages.microbatch_size * o.num_microbatches * o.num_replicas, o.replica,
                         o.num_replicas));
  impl.data = std::move(data);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TorchExecutor>> TorchExecutor::Create(TorchExecutorOptions options) {
  PIPEPLAN_RETURN_IF_ERROR(CheckOptions(options));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  const TorchExecutorOptions& o = impl->options;
  impl->loss = o.loss.empty() ? o.package.loss : o.loss;
  if (impl->loss != "cross_entropy" && impl->loss != "mse") {
    return absl::InvalidArgumentError(
        absl::StrCat("loss \"", impl->loss, "\": use cross_entropy or mse"));
  }
  try {
    impl->device = torch::Device(o.device);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", o.device, "\": ", e.what_without_backtrace()));
  }
  impl->last_stage = o.stages.num_stages() - 1;
  impl->owners = OwnersOf(o.stages, o.stage_to_rank);
  PIPEPLAN_ASSIGN_OR_RETURN(auto initial, LoadInitialParameters(o.package));
  if (o.dtype == "float64") ConvertToFloat64(impl->options.stages, initial);
  for (int s = 0; s < o.stages.num_stages(); ++s) {
    if (o.stage_to_rank[s] == o.rank) PIPEPLAN_RETURN_IF_ERROR(LoadStage(*impl, s, initial));
  }
  if (!impl->params.empty()) {
    PIPEPLAN_ASSIGN_OR_RETURN(impl->optimizer, MakeOptimizer(o.optimizer, impl->params));
  }
  PIPEPLAN_RETURN_IF_ERROR(OpenData(*impl));
  return std::unique_ptr<TorchExecutor>(new TorchExecutor(std::move(impl)));
}

TorchExecutor::TorchExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TorchExecutor::~TorchExecutor() = default;

void TorchExecutor::set_transport(Transport* transport) { impl_->options.transport = transport; }
const ParameterOwners& TorchExecutor::owners() const { return impl_->owners; }
double TorchExecutor::PeakMemoryBytes() const { return impl_->peak_bytes; }
std::optional<double> TorchExecutor::LastLoss() const { return impl_->last_loss; }
bool TorchExecutor::LastStepSkipped() const { return impl_->last_skipped; }

// ---------------------------------------------------------------------------
// Compute

namespace {

// The loss of the last stage's output `y` against `t` (docs/model-package.md).
torch::Tensor Loss(const std::string& loss, const torch::Tensor& y, const torch::Tensor& t) {
  if (loss == "cross_entropy") {
    return torch::cross_entropy_loss(y.reshape({-1, y.size(-1)}), t.reshape({-1}).to(torch::kLong));
  }
  return torch::mse_loss(y, t.to(y.scalar_type()));
}

void TrackMemory(TorchExecutor::Impl& impl) {
  double bytes = 0;
  for (const auto& [name, p] : impl.params) bytes += 2.0 * static_cast<double>(Bytes(p));
  for (const auto& [key, mb] : impl.microbatches) {
    for (const auto& t : mb.inputs) bytes += static_cast<double>(Bytes(t));
    for (const auto& t : mb.outputs) bytes += static_cast<double>(Bytes(t));
    for (const auto& t : mb.input_grads) bytes += static_cast<double>(Bytes(t));
    bytes += static_cast<double>(Bytes(mb.send_f) + Bytes(mb.send_b));
  }
  for (const auto& [key, t] : impl.recv_f) bytes += static_cast<double>(Bytes(t));
  for (const auto& [key, t] : impl.recv_b) bytes += static_cast<double>(Bytes(t));
  impl.peak_bytes = std::max(impl.peak_bytes, bytes);
}

// Stage `s`'s inputs for microbatch `m`: data rows, a local producer's
// outputs, or the received buffer.
absl::StatusOr<std::vector<torch::Tensor>> StageInputs(TorchExecutor::Impl& impl, int s, int m) {
  const CompiledStage& spec = *impl.stages.at(s).spec;
  std::vector<torch::Tensor> inputs;
  if (s == 0) {
    const std::vector<torch::Tensor> all =
        impl.data->Inputs(impl.step, m, impl.options.num_microbatches);
    for (const TensorSpec& in : spec.inputs) {
      for (size_t i = 0; i < impl.options.package.inputs.size(); ++i) {
        if (impl.options.package.inputs[i].name != in.name) continue;
        torch::Tensor x = all[i].to(impl.device);
        if (impl.options.dtype == "float64" && x.is_floating_point()) x = x.to(torch::kFloat64);
        inputs.push_back(x);
      }
    }
    return inputs;  // model inputs need no gradient
  }
  if (impl.IsLocal(s - 1)) {
    auto it = impl.microbatches.find({s - 1, m});
    if (it == impl.microbatches.end() || it->second.outputs.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("F of ", Where(s, m), " before its producer's F"));
    }
    for (const torch::Tensor& t : it->second.outputs) inputs.push_back(t.detach());
  } else {
    auto it = impl.recv_f.find({s, m});
    if (it == impl.recv_f.end()) {
      return absl::FailedPreconditionError(absl::StrCat("F of ", Where(s, m), " without a RECV_F"));
    }
    inputs = Unpack(it->second, spec.inputs, false, impl.device);
    impl.recv_f.erase(it);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (spec.inputs[i].requires_grad) inputs[i].requires_grad_(true);
  }
  return inputs;
}

absl::Status Forward(TorchExecutor::Impl& impl, int s, int m) {
  LocalStage& stage = impl.stages.at(s);
  MicrobatchState& mb = impl.microbatches[{s, m}];
  PIPEPLAN_ASSIGN_OR_RETURN(mb.inputs, StageInputs(impl, s, m));
  std::vector<torch::IValue> args(mb.inputs.begin(), mb.inputs.end());
  try {
    mb.outputs = Flatten(stage.module.forward(std::move(args)));
  } catch (const c10::Error& e) {
    return TorchError(absl::StrCat("forward of ", Where(s, m)), e);
  }
  PIPEPLAN_RETURN_IF_ERROR(CheckOutputs(mb.outputs, *stage.spec, m));
  if (s == impl.last_stage) {
    torch::Tensor loss;
    try {
      const torch::Tensor t =
          impl.data->Targets(impl.step, m, impl.options.num_microbatches).to(impl.device);
      loss = Loss(impl.loss, mb.outputs[0], t) / impl.options.num_microbatches;
    } catch (const c10::Error& e) {
      return TorchError(absl::StrCat(impl.loss, " loss of ", Where(s, m)), e);
    }
    const torch::Tensor value = loss.detach().to(torch::kFloat64);
    impl.step_loss = impl.step_loss.defined() ? impl.step_loss + value : value;
    mb.roots = {loss};
    mb.root_grads = {torch::ones_like(loss)};
  }
  TrackMemory(impl);
  return absl::OkStatus();
}

// Fills mb.roots/root_grads of a non-last stage from the gradients w.r.t.
// its outputs (a local consumer's input gradients or the received buffer).
absl::Status GatherOutputGrads(TorchExecutor::Impl& impl, int s, int m, MicrobatchState& mb) {
  const CompiledStage& spec = *impl.stages.at(s).spec;
  std::vector<torch::Tensor> grads;
  if (impl.IsLocal(s + 1)) {
    auto it = impl.microbatches.find({s + 1, m});
    if (it == impl.microbatches.end() || !it->second.input_grads_done) {
      return absl::FailedPreconditionError(
          absl::StrCat("backward of ", Where(s, m), " before stage ", s + 1, "'s"));
    }
    grads = it->second.input_grads;
  } else {
    auto it = impl.recv_b.find({s, m});
    if (it == impl.recv_b.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("backward of ", Where(s, m), " without a RECV_B"));
    }
    grads = Unpack(it->second, spec.outputs, true, impl.device);
    impl.recv_b.erase(it);
  }
  size_t g = 0;
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    if (!spec.outputs[i].requires_grad) continue;
    if (mb.outputs[i].requires_grad()) {
      mb.roots.push_back(mb.outputs[i]);
      mb.root_grads.push_back(grads[g]);
    }
    ++g;
  }
  return absl::OkStatus();
}

// The requires_grad inputs' gradients (zeros where autograd gave none).
void SetInputGrads(TorchExecutor::Impl& impl, int s, MicrobatchState& mb,
                   const std::vector<torch::Tensor>& grads) {
  const CompiledStage& spec = *impl.stages.at(s).spec;
  mb.input_grads.clear();
  size_t g = 0;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (!spec.inputs[i].requires_grad || s == 0) continue;
    const torch::Tensor& grad = g < grads.size() ? grads[g] : torch::Tensor();
    ++g;
    mb.input_grads.push_back(grad.defined() ? grad.detach() : torch::zeros_like(mb.inputs[i]));
  }
  mb.input_grads_done = true;
}

std::vector<torch::Tensor> GradLeaves(const TorchExecutor::Impl& impl, int s,
                                      const MicrobatchState& mb) {
  std::vector<torch::Tensor> leaves;
  const CompiledStage& spec = *impl.stages.at(s).spec;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (spec.inputs[i].requires_grad && s != 0) leaves.push_back(mb.inputs[i]);
  }
  return leaves;
}

// Drops the step's tensors and gradients.
void ClearStep(TorchExecutor::Impl& impl) {
  for (auto& [name, p] : impl.params) p.mutable_grad() = torch::Tensor();
  impl.microbatches.clear();
  impl.recv_f.clear();
  impl.recv_b.clear();
  impl.step_loss = torch::Tensor();
}

void Release(MicrobatchState& mb) {
  mb.roots.clear();
  mb.root_grads.clear();
  mb.inputs.clear();
  mb.outputs.clear();
  mb.weight_grads_pending = false;
}

// B, or I when `split` (W follows). Full backward accumulates into the
// parameters' and the input leaves' .grad.
absl::Status BackwardInput(TorchExecutor::Impl& impl, int s, int m, bool split) {
  auto it = impl.microbatches.find({s, m});
  if (it == impl.microbatches.end() || it->second.outputs.empty() || it->second.input_grads_done) {
    return absl::FailedPreconditionError(
        absl::StrCat("backward of ", Where(s, m), " without its forward"));
  }
  MicrobatchState& mb = it->second;
  if (s != impl.last_stage) PIPEPLAN_RETURN_IF_ERROR(GatherOutputGrads(impl, s, m, mb));
  LocalStage& stage = impl.stages.at(s);
  const std::vector<torch::Tensor> leaves = GradLeaves(impl, s, mb);
  if (mb.roots.empty()) {  // nothing upstream depends on a gradient
    SetInputGrads(impl, s, mb, {});
    Release(mb);
    return absl::OkStatus();
  }
  if (split && stage.splittable) {
    try {
      std::vector<torch::Tensor> grads;
      if (!leaves.empty()) {
        grads = torch::autograd::grad(mb.roots, leaves, mb.root_grads, /*retain_graph=*/true,
                                      /*create_graph=*/false, /*allow_unused=*/true);
      }
      SetInputGrads(impl, s, mb, grads);
      mb.weight_grads_pending = true;
      return absl::OkStatus();
    } catch (const c10::Error& e) {
      stage.splittable = false;
      std::cerr << "pipeplan-worker: stage " << s << "'s backward cannot be split into I and W ("
                << e.what_without_backtrace()
                << "); running the full backward at I and nothing at W\n";
    }
  }
  try {
    torch::autograd::backward(mb.roots, mb.root_grads);
  } catch (const c10::Error& e) {
    return TorchError(absl::StrCat("backward of ", Where(s, m)), e);
  }
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& leaf : leaves) grads.push_back(leaf.grad());
  SetInputGrads(impl, s, mb, grads);
  Release(mb);
  return absl::OkStatus();
}

absl::Status BackwardWeight(TorchExecutor::Impl& impl, int s, int m) {
  auto it = impl.microbatches.find({s, m});
  if (it == impl.microbatches.end() || !it->second.input_grads_done) {
    return absl::FailedPreconditionError(absl::StrCat("W of ", Where(s, m), " before its I"));
  }
  MicrobatchState& mb = it->second;
  if (!mb.weight_grads_pending) return absl::OkStatus();  // I ran the full backward
  std::vector<torch::Tensor> params;
  for (const auto& [name, p] : impl.stages.at(s).params) params.push_back(p);
  if (!params.empty()) {
    try {
      torch::autograd::backward(mb.roots, mb.root_grads, /*retain_graph=*/false,
                                /*create_graph=*/false, params);
    } catch (const c10::Error& e) {
      return TorchError(absl::StrCat("W of ", Where(s, m)), e);
    }
  }
  Release(mb);
  return absl::OkStatus();
}

}  // namespace

absl::Status TorchExecutor::BeginStep(int64_t step) {
  // A step the runtime abandoned (a transport error) left its tensors and
  // partial gradients behind; the retried step starts clean.
  ClearStep(*impl_);
  impl_->step = step;
  return absl::OkStatus();
}

absl::Status TorchExecutor::Compute(const Action& a) {
  if (!impl_->IsLocal(a.stage) || a.microbatch < 0 ||
      a.microbatch >= impl_->options.num_microbatches) {
    return absl::InvalidArgumentError(
        absl::StrCat(schedule::ActionToString(a), " is not for a stage of this executor"));
  }
  torch::AutoGradMode grad_mode(true);
  switch (a.type) {
    case ActionType::kForward:
      return Forward(*impl_, a.stage, a.microbatch);
    case ActionType::kBackwardInput:
      return BackwardInput(*impl_, a.stage, a.microbatch, /*split=*/true);
    case ActionType::kBackwardWeight:
      return BackwardWeight(*impl_, a.stage, a.microbatch);
    case ActionType::kFullBackward:
      return BackwardInput(*impl_, a.stage, a.microbatch, /*split=*/false);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(schedule::ActionToString(a), " is not an F, I, W or B action"));
  }
}

absl::StatusOr<std::span<const std::byte>> TorchExecutor::SendBuffer(const Action& send) {
  auto it = impl_->microbatches.find({send.stage, send.microbatch});
  const bool forward = send.type == ActionType::kSendF;
  if (!forward && send.type != ActionType::kSendB) {
    return absl::InvalidArgumentError(
        absl::StrCat(schedule::ActionToString(send), " is not a SEND action"));
  }
  if (it == impl_->microbatches.end() ||
      (forward ? it->second.outputs.empty() && !it->second.send_f.defined()
               : !it->second.input_grads_done)) {
    return absl::FailedPreconditionError(
        absl::StrCat(schedule::ActionToString(send), " before the compute that produces it"));
  }
  MicrobatchState& mb = it->second;
  torch::Tensor& buffer = forward ? mb.send_f : mb.send_b;
  if (!buffer.defined()) {
    torch::NoGradGuard no_grad;
    buffer = Pack(forward ? mb.outputs : mb.input_grads);
    TrackMemory(*impl_);
  }
  return std::span<const std::byte>(Span(buffer));
}

absl::StatusOr<std::span<std::byte>> TorchExecutor::RecvBuffer(const Action& recv) {
  const bool forward = recv.type == ActionType::kRecvF;
  if ((!forward && recv.type != ActionType::kRecvB) || !impl_->IsLocal(recv.stage)) {
    return absl::InvalidArgumentError(
        absl::StrCat(schedule::ActionToString(recv), " is not a RECV for a stage of this rank"));
  }
  const CompiledStage& spec = *impl_->stages.at(recv.stage).spec;
  const int64_t bytes =
      forward ? BoundaryBytes(spec.inputs, false) : BoundaryBytes(spec.outputs, true);
  torch::Tensor& buffer = (forward ? impl_->recv_f : impl_->recv_b)[{recv.stage, recv.microbatch}];
  buffer = torch::empty({bytes}, torch::kUInt8);
  TrackMemory(*impl_);
  return Span(buffer);
}

// ---------------------------------------------------------------------------
// The step's update

namespace {

std::span<std::byte> TensorBytes(const torch::Tensor& t) {
  return {static_cast<std::byte*>(t.data_ptr()), static_cast<size_t>(Bytes(t))};
}

absl::Status WaitAll(std::vector<std::unique_ptr<PendingOp>>& ops, absl::Duration timeout,
                     const std::string& what) {
  for (auto& op : ops) {
    absl::Status s = op->Wait(timeout);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  }
  ops.clear();
  return absl::OkStatus();
}

// Averages every gradient of this rank over the data-parallel replicas: one
// flat host buffer (parameters in name order, the same on every replica;
// float64 when a parameter is), a ring all-reduce over the replica group,
// divided by the replicas. Every replica gets the same bits.
absl::Status AverageOverReplicas(TorchExecutor::Impl& impl) {
  Transport* group = impl.options.replica_group;
  const int d = impl.options.num_replicas;
  if (d < 2 || group == nullptr || impl.params.empty()) return absl::OkStatus();
  torch::ScalarType type = torch::kFloat32;
  for (const auto& [name, p] : impl.params) {
    if (p.scalar_type() == torch::kFloat64) type = torch::kFloat64;
  }
  std::vector<torch::Tensor> parts;
  for (const auto& [name, p] : impl.params) {
    parts.push_back(p.grad().defined() ? p.grad().detach().to(torch::kCPU, type).reshape({-1})
                                       : torch::zeros({p.numel()}, torch::dtype(type)));
  }
  torch::Tensor flat = torch::cat(parts).contiguous();
  const uint64_t epoch = static_cast<uint64_t>(impl.step);
  absl::Status s =
      type == torch::kFloat64
          ? RingAllReduceSum(*group, std::span<double>(flat.data_ptr<double>(), flat.numel()),
                             epoch, impl.options.comm_timeout)
          : RingAllReduceSum(*group, std::span<float>(flat.data_ptr<float>(), flat.numel()), epoch,
                             impl.options.comm_timeout);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("step ", impl.step, ": gradient all-reduce over ", d,
                                               " replicas: ", s.message()));
  }
  flat.div_(d);
  int64_t offset = 0;
  for (auto& [name, p] : impl.params) {
    p.mutable_grad() =
        flat.narrow(0, offset, p.numel()).view(p.sizes()).to(p.device(), p.scalar_type()).clone();
    offset += p.numel();
  }
  return absl::OkStatus();
}

// The mean of the replicas' losses (each its slice's mean), on the last
// stage's rank of every replica.
absl::StatusOr<double> MeanOverReplicas(TorchExecutor::Impl& impl, double loss) {
  Transport* group = impl.options.replica_group;
  const int d = impl.options.num_replicas;
  if (d < 2 || group == nullptr) return loss;
  double value[1] = {loss};
  absl::Status s =
      SumOverRanks(*group, value, static_cast<uint64_t>(impl.step), impl.options.comm_timeout);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("step ", impl.step, ": the loss over ", d,
                                               " replicas: ", s.message()));
  }
  return value[0] / d;
}

// Sums the gradient of every parameter held by several ranks over those
// ranks, in rank order, so that every copy gets the same bits.
absl::Status SumTiedGradients(TorchExecutor::Impl& impl) {
  const int rank = impl.options.rank;
  struct Tied {
    torch::Tensor* param;
    std::vector<int> ranks;
    std::map<int, torch::Tensor> grads;  // host, by rank
  };
  std::vector<Tied> tied;
  std::vector<std::unique_ptr<PendingOp>> ops;
  uint64_t index = 0;
  for (const auto& [name, ranks] : impl.owners) {
    if (ranks.size() < 2) continue;
    const uint64_t tag = ExecutorTag(TagPurpose::kTiedGradient, impl.step, index++);
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
    Transport* t = impl.options.transport;
    if (t == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter \"", name, "\" is tied across ranks; the executor needs a transport"));
    }
    torch::Tensor& p = impl.params.at(name);
    Tied entry{&p, ranks, {}};
    torch::Tensor mine = p.grad().defined() ? p.grad().detach().to(torch::kCPU).contiguous()
                                            : torch::zeros_like(p, torch::kCPU);
    entry.grads[rank] = mine;
    for (int r : ranks) {
      if (r == rank) continue;
      torch::Tensor& theirs = entry.grads[r] = torch::empty_like(mine);
      PIPEPLAN_ASSIGN_OR_RETURN(auto send, t->Send(r, tag, TensorBytes(mine)));
      PIPEPLAN_ASSIGN_OR_RETURN(auto recv, t->Recv(r, tag, TensorBytes(theirs)));
      ops.push_back(std::move(send));
      ops.push_back(std::move(recv));
    }
    tied.push_back(std::move(entry));
  }
  PIPEPLAN_RETURN_IF_ERROR(WaitAll(ops, impl.options.comm_timeout,
                                   absl::StrCat("step ", impl.step, ": tied gradients")));
  for (Tied& entry : tied) {
    torch::Tensor sum = entry.grads.at(entry.ranks[0]).clone();
    for (size_t i = 1; i < entry.ranks.size(); ++i) sum.add_(entry.grads.at(entry.ranks[i]));
    entry.param->mutable_grad() = sum.to(impl.device);
  }
  return absl::OkStatus();
}

// Agrees with every rank on whether the step is finite and, with clipping,
// scales the gradients to the global norm limit. Returns false for a
// non-finite step (`why` says what).
absl::StatusOr<bool> AgreeAndClip(TorchExecutor::Impl& impl, std::optional<double> loss,
                                  std::string* why) {
  const double clip = impl.options.optimizer.clip_grad_norm;
  double totals[2] = {0, loss && !std::isfinite(*loss) ? 1.0 : 0.0};
  if (clip > 0) {
    for (const auto& [name, p] : impl.params) {
      if (!p.grad().defined() || !impl.IsPrimaryOwner(name)) continue;
      const double n = p.grad().norm().item<double>();
      totals[0] += n * n;
    }
  }
  Transport* t = impl.options.transport;
  if (t != nullptr && t->size() > 1) {
    absl::Status s =
        SumOverRanks(*t, totals, static_cast<uint64_t>(impl.step), impl.options.comm_timeout);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("step ", impl.step, ": ", s.message()));
    }
  }
  if (totals[1] > 0) {
    *why =
        loss ? absl::StrCat("the loss is ", *loss) : "the loss (on the last stage) is not finite";
    return false;
  }
  if (clip <= 0) return true;
  const double norm = std::sqrt(totals[0]);
  if (!std::isfinite(norm)) {
    *why = absl::StrCat("the gradient norm is ", norm);
    return false;
  }
  const double coef = clip / (norm + 1e-6);
  if (coef < 1) {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : impl.params) {
      if (p.grad().defined()) p.mutable_grad().mul_(coef);
    }
  }
  return true;
}

absl::Status ApplyUpdate(TorchExecutor::Impl& impl, std::optional<double> loss) {
  // Replicas first: the tied sums then add identical values on every rank.
  PIPEPLAN_RETURN_IF_ERROR(AverageOverReplicas(impl));
  PIPEPLAN_RETURN_IF_ERROR(SumTiedGradients(impl));
  std::string why;
  PIPEPLAN_ASSIGN_OR_RETURN(bool finite, AgreeAndClip(impl, loss, &why));
  if (!finite) {
    if (!impl.options.skip_nonfinite_steps) {
      return absl::OutOfRangeError(absl::StrCat("step ", impl.step, ": ", why,
                                                "; training stops (skipping such steps is an "
                                                "option)"));
    }
    std::cerr << "pipeplan-worker: step " << impl.step << ": " << why << "; update skipped\n";
    impl.last_skipped = true;
    return absl::OkStatus();
  }
  if (impl.optimizer) {
    try {
      impl.optimizer->step();
    } catch (const c10::Error& e) {
      return TorchError(absl::StrCat("step ", impl.step, ": optimizer"), e);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TorchExecutor::EndStep() {
  Impl& impl = *impl_;
  impl.last_skipped = false;
  std::optional<double> loss;
  absl::Status status = absl::OkStatus();
  if (impl.IsLocal(impl.last_stage)) {
    absl::StatusOr<double> mean =
        MeanOverReplicas(impl, impl.step_loss.defined() ? impl.step_loss.item<double>() : 0.0);
    if (mean.ok()) loss = *mean;
    status = mean.status();
  }
  if (status.ok()) status = ApplyUpdate(impl, loss);
  ClearStep(impl);
  if (loss) impl.last_loss = loss;
  return status;
}

}  // namespace pipeplan::worker
