// TorchExecutor::Create: checks the options, loads this rank's stages with
// their parameters (tied slots share one tensor), the optimizer and the data.
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <iterator>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "numerics.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/package/checkpoint.h"
#include "pipeplan/worker/torch/torch_devices.h"
#include "pipeplan/worker/transport/collectives.h"
#include "torch_executor_impl.h"

namespace pipeplan::worker {
// ---------------------------------------------------------------------------
// Loading

int TorchExecutor::Impl::NumRanks() const {
  return *std::max_element(options.stage_to_rank.begin(), options.stage_to_rank.end()) + 1;
}

bool TorchExecutor::Impl::IsPrimaryOwner(const std::string& name) const {
  auto it = owners.find(name);
  return it != owners.end() && it->second.front() == options.rank;
}

absl::StatusOr<torch::IValue> LoadTorchSaved(const std::string& path, const std::string& what) {
  PIPEPLAN_ASSIGN_OR_RETURN(const std::vector<char> bytes, ReadFileBytes(path));
  try {
    return torch::jit::pickle_load(bytes);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a torch.save'd ", what, ": ", e.what_without_backtrace()));
  }
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
  PIPEPLAN_ASSIGN_OR_RETURN(const torch::IValue v, LoadTorchSaved(path, "dict of tensors"));
  std::map<std::string, torch::Tensor> out;
  if (!v.isGenericDict()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a torch.save'd dict of tensors: not a dict"));
  }
  for (const auto& kv : v.toGenericDict()) {
    if (kv.key().isString() && kv.value().isTensor()) {
      out[kv.key().toStringRef()] = kv.value().toTensor();
    }
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

namespace {

// The canonical name of parameter slot `slot` (holding `value`) of the stage
// at `path`: as stages.json lists it, or the listed slot it aliases (a tied
// parameter seen under a second path).
absl::StatusOr<std::string> CanonicalName(
    const std::string& path, const std::string& slot, const torch::Tensor& value,
    const std::map<std::string, std::string>& name_of,
    const std::map<const void*, std::string>& name_of_storage) {
  if (auto it = name_of.find(slot); it != name_of.end()) return it->second;
  if (auto it = name_of_storage.find(value.data_ptr()); it != name_of_storage.end()) {
    return it->second;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": parameter \"", slot, "\" is not listed in stages.json"));
}

// Points `slot` of `stage` at this rank's canonical tensor `name`, made from
// the package's initial value on first use.
absl::Status BindSlot(TorchExecutor::Impl& impl, LocalStage& stage, const std::string& path,
                      const std::string& slot, const torch::Tensor& value, const std::string& name,
                      const std::map<std::string, torch::Tensor>& initial) {
  auto init = initial.find(name);
  if (init == initial.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": parameter \"", slot, "\" is \"", name,
                                                   "\", which the package lacks"));
  }
  if (init->second.sizes() != value.sizes() || init->second.scalar_type() != value.scalar_type()) {
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
  return absl::OkStatus();
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
  std::map<const void*, std::string> name_of_storage;
  std::vector<std::pair<std::string, torch::Tensor>> slots;
  for (const auto& p : stage.module.named_parameters(/*recurse=*/true)) {
    slots.emplace_back(p.name, p.value);
    if (name_of.contains(p.name)) name_of_storage[p.value.data_ptr()] = name_of[p.name];
  }
  std::set<std::string> seen;
  for (const auto& [slot, value] : slots) {
    PIPEPLAN_ASSIGN_OR_RETURN(const std::string name,
                              CanonicalName(path, slot, value, name_of, name_of_storage));
    seen.insert(slot);
    PIPEPLAN_RETURN_IF_ERROR(BindSlot(impl, stage, path, slot, value, name, initial));
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

namespace {
// `name` as a device of this process: INVALID_ARGUMENT when it is not "cpu"
// or "cuda[:N]", FAILED_PRECONDITION naming what LibTorch sees when the CUDA
// device does not exist (a CPU-only LibTorch has none).
absl::StatusOr<torch::Device> ExistingDevice(const std::string& name) {
  torch::Device device = torch::kCPU;
  try {
    device = torch::Device(name);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", name, "\": ", e.what_without_backtrace()));
  }
  if (!device.is_cuda() && !device.is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", name, "\": the torch executor runs on cpu or cuda:N"));
  }
  if (!device.is_cuda()) return device;
  if (!device.has_index()) device = torch::Device(torch::kCUDA, 0);
  const int count = TorchCudaDeviceCount();
  if (device.index() >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device \"", name, "\" does not exist: ",
        count == 0 ? "LibTorch sees no CUDA device (a CPU-only LibTorch, or no GPU visible)"
                   : absl::StrCat("LibTorch sees ", count,
                                  " CUDA device(s), cuda:0 to cuda:", count - 1)));
  }
  return device;
}
}  // namespace

absl::StatusOr<std::unique_ptr<TorchExecutor>> TorchExecutor::Create(TorchExecutorOptions options) {
  // LibTorch throws what its own checks refuse (a CUDA call before CUDA is
  // ready, say): a status to report, not a terminated worker.
  try {
    return CreateOnDevice(std::move(options));
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("creating the torch executor: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<std::unique_ptr<TorchExecutor>> TorchExecutor::CreateOnDevice(
    TorchExecutorOptions options) {
  PIPEPLAN_RETURN_IF_ERROR(CheckOptions(options));
  auto impl = std::make_unique<Impl>();
  impl->memory = CpuMemoryAccount::Make();
  CpuMemoryAccount::Scope charge(impl->memory.get());
  impl->options = std::move(options);
  const TorchExecutorOptions& o = impl->options;
  impl->loss = o.loss.empty() ? o.package.loss : o.loss;
  if (impl->loss != "cross_entropy" && impl->loss != "mse") {
    return absl::InvalidArgumentError(
        absl::StrCat("loss \"", impl->loss, "\": use cross_entropy or mse"));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(impl->device, ExistingDevice(o.device));
  SetTorchNumerics(impl->device, o.deterministic);
  impl->timer = std::make_unique<ComputeTimer>(impl->device);
  // The peak is this executor's (a plan version's), not the process's.
  ResetPeakMemory(impl->device);
  impl->device_buffers =
      impl->device.is_cuda() && o.transport != nullptr && o.transport->TakesDeviceBuffers();
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
  {
    // The data file is the input pipeline's memory, not the stage's.
    CpuMemoryAccount::Scope uncharged(nullptr);
    PIPEPLAN_RETURN_IF_ERROR(OpenData(*impl));
  }
  SetUpBuckets(*impl);
  initial.clear();  // every stage's initial values: only this rank's are kept
  impl->memory->ResetPeak();
  return std::unique_ptr<TorchExecutor>(new TorchExecutor(std::move(impl)));
}

TorchExecutor::TorchExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TorchExecutor::~TorchExecutor() = default;

void TorchExecutor::set_transport(Transport* transport) {
  impl_->options.transport = transport;
  impl_->device_buffers =
      impl_->device.is_cuda() && transport != nullptr && transport->TakesDeviceBuffers();
}
const ParameterOwners& TorchExecutor::owners() const { return impl_->owners; }
double TorchExecutor::PeakMemoryBytes() const {
  if (impl_->device.is_cuda()) return AllocatorPeakBytes(impl_->device).value_or(impl_->peak_bytes);
  return static_cast<double>(impl_->memory->peak_bytes());
}
std::string TorchExecutor::PeakMemorySource() const {
  return impl_->device.is_cuda() ? "cuda_allocator" : "cpu_allocator";
}
std::optional<double> TorchExecutor::LastLoss() const { return impl_->last_loss; }
bool TorchExecutor::LastStepSkipped() const { return impl_->last_skipped; }

}  // namespace pipeplan::worker
