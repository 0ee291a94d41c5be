// TorchExecutor's step: F, I, W and B of this rank's stages and the boundary
// buffers they fill and read. Loading is in torch_loading.cc, the step's
// update in torch_update.cc, state and checkpoints in torch_state.cc.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <iterator>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/package/checkpoint.h"
#include "pipeplan/worker/transport/collectives.h"
#include "torch_executor_impl.h"

namespace pipeplan::worker {
namespace {

using schedule::Action;
using schedule::ActionType;

// Raw bytes of `t` (contiguous, host order) as a flat uint8 view.
torch::Tensor ByteView(const torch::Tensor& t) {
  return t.contiguous().reshape({-1}).view(torch::kUInt8);
}

// One transport buffer with the bytes of `tensors` concatenated (the wire
// layout), made with `options` (BufferOptions).
torch::Tensor Pack(const std::vector<torch::Tensor>& tensors, const torch::TensorOptions& options) {
  int64_t total = 0;
  for (const torch::Tensor& t : tensors) total += t.numel() * t.element_size();
  torch::Tensor buffer = torch::empty({total}, options);
  int64_t offset = 0;
  for (const torch::Tensor& t : tensors) {
    const int64_t n = t.numel() * t.element_size();
    if (n > 0) buffer.narrow(0, offset, n).copy_(ByteView(t));
    offset += n;
  }
  return buffer;
}

// The tensors of `specs` (only the requires_grad ones when `gradients`) out
// of a received buffer (host or device), made on `device` and filled with
// one copy each.
std::vector<torch::Tensor> Unpack(const torch::Tensor& buffer, const std::vector<TensorSpec>& specs,
                                  bool gradients, torch::Device device) {
  std::vector<torch::Tensor> out;
  int64_t offset = 0;
  for (const TensorSpec& spec : specs) {
    if (gradients && !spec.requires_grad) continue;
    torch::Tensor t =
        torch::empty(spec.shape, torch::dtype(*ScalarTypeOf(spec.dtype)).device(device));
    const int64_t n = t.numel() * t.element_size();
    if (n > 0) t.reshape({-1}).view(torch::kUInt8).copy_(buffer.narrow(0, offset, n));
    offset += n;
    out.push_back(t);
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

}  // namespace

void ClearStep(TorchExecutor::Impl& impl) {
  for (auto& [name, p] : impl.params) p.mutable_grad() = torch::Tensor();
  impl.microbatches.clear();
  impl.recv_f.clear();
  impl.recv_b.clear();
  impl.step_loss = torch::Tensor();
  impl.gradient_passes.clear();
  impl.final_pass_stage = -1;
}

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
    std::vector<torch::Tensor> all;
    {
      // The step's batch is the input pipeline's memory, not the stage's.
      CpuMemoryAccount::Scope uncharged(nullptr);
      all = impl.data->Inputs(impl.step, m, impl.options.num_microbatches);
    }
    for (const TensorSpec& in : spec.inputs) {
      for (size_t i = 0; i < impl.options.package.inputs.size(); ++i) {
        if (impl.options.package.inputs[i].name != in.name) continue;
        torch::Tensor x = ToDevice(impl, all[i]);
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

// pipeplan/rng.py's base(seed, step, microbatch): the part of every random
// operator's seed that the executor supplies (the stage adds its node
// index). Kept below 2^51, as TorchScript and Python compute it alike.
int64_t RngBase(int64_t seed, int64_t step, int64_t microbatch) {
  constexpr int64_t kPrime = 2147483647, kMultiplier = 1000003;
  const auto mix = [&](int64_t a, int64_t b) { return (a % kPrime * kMultiplier + b) % kPrime; };
  return mix(mix((seed % kPrime + kPrime) % kPrime, step), microbatch);
}

// A stage with random operators (the stage compiler gave it `_pp_rng`)
// draws from (job seed, step, microbatch over all replicas), as the
// reference trainer does, so a run repeats and matches one process.
void SeedRandomOperators(TorchExecutor::Impl& impl, LocalStage& stage, int m) {
  if (!stage.module.hasattr("_pp_rng")) return;
  const int64_t microbatch =
      static_cast<int64_t>(impl.options.replica) * impl.options.num_microbatches + m;
  stage.module.setattr("_pp_rng", RngBase(impl.options.seed, impl.step, microbatch));
}

// The stage's module on mb.inputs (and the last stage's loss, into mb.roots
// and `loss`); with autograd or without, as the caller's mode says.
absl::Status RunForward(TorchExecutor::Impl& impl, int s, int m, MicrobatchState& mb,
                        torch::Tensor* loss) {
  LocalStage& stage = impl.stages.at(s);
  // Seeded here, so a recomputed forward draws the masks the first one drew.
  SeedRandomOperators(impl, stage, m);
  std::vector<torch::IValue> args(mb.inputs.begin(), mb.inputs.end());
  try {
    mb.outputs = Flatten(stage.module.forward(std::move(args)));
  } catch (const c10::Error& e) {
    return TorchError(absl::StrCat("forward of ", Where(s, m)), e);
  }
  PIPEPLAN_RETURN_IF_ERROR(CheckOutputs(mb.outputs, *stage.spec, m));
  if (s != impl.last_stage) return absl::OkStatus();
  try {
    torch::Tensor host;
    {
      CpuMemoryAccount::Scope uncharged(nullptr);  // the input pipeline's
      host = impl.data->Targets(impl.step, m, impl.options.num_microbatches);
    }
    const torch::Tensor t = ToDevice(impl, host);
    *loss = Loss(impl.loss, mb.outputs[0], t) / impl.options.num_microbatches;
  } catch (const c10::Error& e) {
    return TorchError(absl::StrCat(impl.loss, " loss of ", Where(s, m)), e);
  }
  mb.roots = {*loss};
  mb.root_grads = {torch::ones_like(*loss)};
  return absl::OkStatus();
}

absl::Status Forward(TorchExecutor::Impl& impl, int s, int m) {
  MicrobatchState& mb = impl.microbatches[{s, m}];
  PIPEPLAN_ASSIGN_OR_RETURN(mb.inputs, StageInputs(impl, s, m));
  torch::Tensor loss;
  if (impl.Recomputes(s)) {
    // Checkpointed: nothing is saved for the backward but the inputs (and
    // the RNG state, so dropout draws the same masks again).
    if (!impl.device.is_cuda()) mb.rng_state = at::detail::getDefaultCPUGenerator().get_state();
    torch::NoGradGuard no_grad;
    PIPEPLAN_RETURN_IF_ERROR(RunForward(impl, s, m, mb, &loss));
    mb.recompute_pending = true;
  } else {
    PIPEPLAN_RETURN_IF_ERROR(RunForward(impl, s, m, mb, &loss));
  }
  if (loss.defined()) {
    const torch::Tensor value = loss.detach().to(torch::kFloat64);
    impl.step_loss = impl.step_loss.defined() ? impl.step_loss + value : value;
  }
  TrackMemory(impl);
  return absl::OkStatus();
}

// A checkpointed stage's forward again, with autograd, from its kept inputs
// and RNG state (the generator's own state is put back after).
absl::Status Recompute(TorchExecutor::Impl& impl, int s, int m, MicrobatchState& mb) {
  std::optional<torch::Tensor> resume;
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle
  if (mb.rng_state.defined()) {
    resume = generator.get_state();
    generator.set_state(mb.rng_state);
  }
  mb.roots.clear();
  mb.root_grads.clear();
  torch::Tensor loss;
  absl::Status status = RunForward(impl, s, m, mb, &loss);
  if (resume) generator.set_state(*resume);
  mb.recompute_pending = false;
  mb.rng_state = torch::Tensor();
  return status;
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
  if (it == impl.microbatches.end() ||
      (it->second.outputs.empty() && !it->second.recompute_pending) ||
      it->second.input_grads_done) {
    return absl::FailedPreconditionError(
        absl::StrCat("backward of ", Where(s, m), " without its forward"));
  }
  MicrobatchState& mb = it->second;
  if (mb.recompute_pending) PIPEPLAN_RETURN_IF_ERROR(Recompute(impl, s, m, mb));
  if (s != impl.last_stage) PIPEPLAN_RETURN_IF_ERROR(GatherOutputGrads(impl, s, m, mb));
  LocalStage& stage = impl.stages.at(s);
  const std::vector<torch::Tensor> leaves = GradLeaves(impl, s, mb);
  if (mb.roots.empty()) {        // nothing upstream depends on a gradient
    BeginGradientPass(impl, s);  // the stage's pass, without gradients
    EndGradientPass(impl);
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
  BeginGradientPass(impl, s);
  try {
    torch::autograd::backward(mb.roots, mb.root_grads);
  } catch (const c10::Error& e) {
    EndGradientPass(impl);
    return TorchError(absl::StrCat("backward of ", Where(s, m)), e);
  }
  EndGradientPass(impl);
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
  BeginGradientPass(impl, s);
  if (!params.empty()) {
    try {
      torch::autograd::backward(mb.roots, mb.root_grads, /*retain_graph=*/false,
                                /*create_graph=*/false, params);
    } catch (const c10::Error& e) {
      EndGradientPass(impl);
      return TorchError(absl::StrCat("W of ", Where(s, m)), e);
    }
  }
  EndGradientPass(impl);
  Release(mb);
  return absl::OkStatus();
}

}  // namespace

absl::Status TorchExecutor::BeginStep(int64_t step) {
  // A step the runtime abandoned (a transport error) left its tensors and
  // partial gradients behind; the retried step starts clean.
  CpuMemoryAccount::Scope charge(impl_->memory.get());
  ClearStep(*impl_);
  impl_->step = step;
  if (impl_->buckets) impl_->buckets->BeginStep(step);
  return absl::OkStatus();
}

namespace {
absl::Status RunCompute(TorchExecutor::Impl& impl, const Action& a) {
  torch::AutoGradMode grad_mode(true);
  // Stages run op by op under autograd, as eager PyTorch runs the model
  // (what the exporter's activation bytes describe): the profiling
  // executor's differentiable graphs would keep every tensor a stage saved
  // until its whole backward ends, with that backward's intermediates (the
  // setting is per thread, hence here).
  torch::jit::GraphOptimizerEnabledGuard eager_autograd(false);
  switch (a.type) {
    case ActionType::kForward:
      return Forward(impl, a.stage, a.microbatch);
    case ActionType::kBackwardInput:
      return BackwardInput(impl, a.stage, a.microbatch, /*split=*/true);
    case ActionType::kBackwardWeight:
      return BackwardWeight(impl, a.stage, a.microbatch);
    case ActionType::kFullBackward:
      return BackwardInput(impl, a.stage, a.microbatch, /*split=*/false);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(schedule::ActionToString(a), " is not an F, I, W or B action"));
  }
}
}  // namespace

absl::Status TorchExecutor::Compute(const Action& a) {
  if (!impl_->IsLocal(a.stage) || a.microbatch < 0 ||
      a.microbatch >= impl_->options.num_microbatches) {
    return absl::InvalidArgumentError(
        absl::StrCat(schedule::ActionToString(a), " is not for a stage of this executor"));
  }
  impl_->last_compute_seconds.reset();
  // On a GPU the calls return before the kernels finish: CUDA events time
  // the action (and Stop waits for it, so the sends that follow read
  // finished tensors). On the CPU the runtime's clock is exact.
  const bool timed = impl_->device.is_cuda();
  CpuMemoryAccount::Scope charge(impl_->memory.get());
  if (timed) impl_->timer->Start();
  absl::Status status = RunCompute(*impl_, a);
  if (timed && status.ok()) impl_->last_compute_seconds = impl_->timer->Stop();
  return status;
}

std::optional<double> TorchExecutor::LastComputeSeconds() const {
  return impl_->last_compute_seconds;
}

int TorchExecutor::CpuComputeThreads() const {
  return impl_->device.is_cuda() ? 0 : at::get_num_threads();
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
    CpuMemoryAccount::Scope charge(impl_->memory.get());
    torch::NoGradGuard no_grad;
    buffer = Pack(forward ? mb.outputs : mb.input_grads, BufferOptions(*impl_));
    // A checkpointed stage keeps only its inputs: its backward makes the
    // outputs again.
    if (forward && mb.recompute_pending) mb.outputs.clear();
    // The gradients now sit in the send buffer (no local stage reads them).
    if (!forward) mb.input_grads.clear();
    TrackMemory(*impl_);
  }
  return std::span<const std::byte>(Span(buffer));
}

void TorchExecutor::SendDone(const Action& send) {
  auto it = impl_->microbatches.find({send.stage, send.microbatch});
  if (it == impl_->microbatches.end()) return;
  (send.type == ActionType::kSendF ? it->second.send_f : it->second.send_b) = torch::Tensor();
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
  CpuMemoryAccount::Scope charge(impl_->memory.get());
  buffer = torch::empty({bytes}, BufferOptions(*impl_));
  TrackMemory(*impl_);
  return Span(buffer);
}

}  // namespace pipeplan::worker
