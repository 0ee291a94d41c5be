// TorchExecutor's state, shared by its translation units (loading, the
// step's actions, the step's update, state and checkpoint I/O). Private to pipeplan_torch_executor:
// includes LibTorch, so it must never meet a generated .pb.h.
#ifndef PIPEPLAN_WORKER_SRC_TORCH_EXECUTOR_IMPL_H_
#define PIPEPLAN_WORKER_SRC_TORCH_EXECUTOR_IMPL_H_

#include <torch/optim.h>
#include <torch/script.h>

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cpu_memory_account.h"
#include "device_stats.h"
#include "gradient_buckets.h"
#include "pipeplan/worker/package/state_pack.h"
#include "pipeplan/worker/torch/torch_executor.h"
#include "torch_data.h"

namespace pipeplan::worker {

struct LocalStage {
  const CompiledStage* spec = nullptr;
  torch::jit::Module module;
  // The canonical parameters the module uses, by name (shared with other
  // local stages that use the same tied parameter).
  std::map<std::string, torch::Tensor> params;
  // False once splitting its backward into I and W failed: I then runs the
  // full backward and W nothing.
  bool splittable = true;
};

// What one microbatch of one stage keeps between its F and its W/B.
struct MicrobatchState {
  std::vector<torch::Tensor> inputs;   // leaves: floating ones require grad
  std::vector<torch::Tensor> outputs;  // the module's outputs
  // The tensors backward starts from and their gradients (the loss on the
  // last stage); kept from I until W.
  std::vector<torch::Tensor> roots;
  std::vector<torch::Tensor> root_grads;
  // Gradients w.r.t. the requires_grad inputs, after I/B.
  std::vector<torch::Tensor> input_grads;
  bool input_grads_done = false;
  bool weight_grads_pending = false;
  // A recomputing stage ran its forward without autograd: the backward
  // runs it again from `inputs` with the RNG state it started from.
  bool recompute_pending = false;
  torch::Tensor rng_state;
  torch::Tensor send_f;  // uint8 transport buffers (BufferOptions)
  torch::Tensor send_b;
};

using StageMicrobatch = std::pair<int, int>;

struct TorchExecutor::Impl {
  TorchExecutorOptions options;
  torch::Device device = torch::kCPU;
  // The transport takes device memory (NCCL) and the executor is on a GPU:
  // boundary buffers stay on the device. Else they are host memory, pinned
  // on a GPU so the copies to and from it are DMA.
  bool device_buffers = false;
  std::unique_ptr<ComputeTimer> timer;
  std::optional<double> last_compute_seconds;  // CUDA events; GPU only
  std::string loss;
  int last_stage = 0;
  std::map<int, LocalStage> stages;
  // This rank's canonical parameters (one tensor per name, also for a name
  // used by two local stages).
  std::map<std::string, torch::Tensor> params;
  ParameterOwners owners;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::optional<TrainingData> data;

  int64_t step = 0;
  std::map<StageMicrobatch, MicrobatchState> microbatches;
  std::map<StageMicrobatch, torch::Tensor> recv_f;
  std::map<StageMicrobatch, torch::Tensor> recv_b;
  torch::Tensor step_loss;  // float64 sum over microbatches, on device
  std::optional<double> last_loss;
  bool last_skipped = false;
  double peak_bytes = 0;
  // The tensor bytes this executor's calls hold on the CPU (its peak is
  // PeakMemoryBytes on the CPU).
  std::shared_ptr<CpuMemoryAccount> memory;
  // With replicas and bucketing (allreduce_bucket_bytes > 0).
  std::unique_ptr<GradientBuckets> buckets;
  std::optional<double> last_exposed_allreduce;
  // Per local stage: backward passes that produced parameter gradients this
  // step; the num_microbatches-th is the last, whose gradients are final.
  std::map<int, int> gradient_passes;
  int final_pass_stage = -1;  // the stage whose last such pass is running

  bool Recomputes(int stage) const {
    return stage < static_cast<int>(options.recompute.size()) && options.recompute[stage];
  }
  bool IsLocal(int stage) const { return stages.contains(stage); }
  int NumRanks() const;
  // The lowest rank holding `name` is the one that checkpoints it and
  // counts it in the gradient norm.
  bool IsPrimaryOwner(const std::string& name) const;

  // Optimizer state of `p` (nullptr when it has none yet).
  torch::optim::OptimizerParamState* StateOf(const torch::Tensor& p) const;
  std::string OptimizerKind() const { return options.optimizer.kind; }
};

// Helpers every part of the executor uses: where in the step an error
// happened, a LibTorch error as a status, a shape and a tensor's bytes.
inline std::string Where(int stage, int m) {
  return absl::StrCat("stage ", stage, " microbatch ", m);
}
inline absl::Status TorchError(const std::string& what, const c10::Error& e) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
}
inline int64_t Bytes(const torch::Tensor& t) {
  return t.defined() ? t.numel() * t.element_size() : 0;
}

// Options of a transport buffer (uint8): see Impl::device_buffers.
inline torch::TensorOptions BufferOptions(const TorchExecutor::Impl& impl) {
  torch::TensorOptions o = torch::TensorOptions().dtype(torch::kUInt8);
  if (impl.device_buffers) return o.device(impl.device);
  return o.pinned_memory(impl.device.is_cuda());
}

// Host data (inputs, targets) on the executor's device: one copy, from
// pinned memory on a GPU (asynchronous; the pinned block stays reserved
// until the copy is done).
inline torch::Tensor ToDevice(const TorchExecutor::Impl& impl, const torch::Tensor& host) {
  if (!impl.device.is_cuda()) return host.to(impl.device);
  return host.pin_memory().to(impl.device, /*non_blocking=*/true);
}

// Drops the step's tensors and gradients (torch_executor.cc): after the
// update, and when a step fails.
void ClearStep(TorchExecutor::Impl& impl);

// One parameter's optimizer state, read from a record or a format-1 shard:
// "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (adam, adamw; with `step`) or
// "momentum_buffer" (sgd); none before the first update. The tensors may
// view a buffer: the state gets copies on the parameter's device.
struct OptimizerFields {
  std::map<std::string, torch::Tensor> tensors;
  std::optional<int64_t> step;
};
absl::Status SetOptimizerFields(TorchExecutor::Impl& impl, const torch::Tensor& p,
                                const OptimizerFields& fields, const std::string& where);

// Overwrites parameter `name` and its optimizer state from a tensor record
// (torch_state.cc). INVALID_ARGUMENT naming `source` and the parameter when
// the record does not fit it.
absl::Status ImportRecord(TorchExecutor::Impl& impl, const std::string& name,
                          std::span<const std::byte> record, const std::string& source);
// This rank's parameters (only those it is the lowest owner of with
// `primary_only`: a checkpoint shard's) as records in `pack`.
absl::Status ExportRecords(const TorchExecutor::Impl& impl, bool primary_only, StatePack& pack);
// Registers the gradient hooks and makes the buckets when the executor has
// replicas and buckets (torch_update.cc).
void SetUpBuckets(TorchExecutor::Impl& impl);
// Around a backward of stage `s` that produces parameter gradients: marks
// the stage's last such pass of the step, whose hooks fill the buckets.
void BeginGradientPass(TorchExecutor::Impl& impl, int s);
void EndGradientPass(TorchExecutor::Impl& impl);

// The optimizer the options name, over `params` in name order.
absl::StatusOr<std::unique_ptr<torch::optim::Optimizer>> MakeOptimizer(
    const OptimizerOptions& options, const std::map<std::string, torch::Tensor>& params);

// The object torch.save wrote to `path` (torch_loading.cc): the package's
// initial parameters and a format-1 checkpoint shard are read alike. A file
// LibTorch cannot unpickle is INVALID_ARGUMENT "<path> is not a torch.save'd
// <what>: <LibTorch's reason>".
absl::StatusOr<torch::IValue> LoadTorchSaved(const std::string& path, const std::string& what);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_TORCH_EXECUTOR_IMPL_H_
