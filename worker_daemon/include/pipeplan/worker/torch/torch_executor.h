// The torch executor: trains the user's own model (a model package cut into
// compiled stages, docs/model-package.md) with LibTorch, behind the Executor
// interface the stage runtime drives.
//
// This header is torch-free (the implementation is behind a pointer), so the
// worker, which includes generated .pb.h files, can include it; only
// pipeplan_torch_executor's own sources see LibTorch.
//
// Per step: F runs a stage's scripted module on its inputs (stage 0: the
// data rows of the microbatch; else the received activations, every floating
// one detached and marked requires_grad); the last stage adds the loss with
// the targets, divided by the number of microbatches. B back-propagates the
// received output gradients (the loss on the last stage); I/W split it for
// zero-bubble schedules (I: input gradients only, W: parameter gradients). A
// stage whose graph cannot be split runs the full backward at I and nothing
// at W, and says so once on stderr. Parameter gradients accumulate over the
// microbatches; EndStep averages the gradients over the data-parallel
// replicas (a ring all-reduce over the rank's replica group, divided by the
// replicas), sums the gradients of tied parameters over the ranks holding
// them (in rank order, so copies stay bit-identical), clips by the global
// norm over all ranks (each parameter counted once), steps the optimizer,
// zeroes the gradients and frees the step's tensors. Replicas so stay
// identical, modulo nothing: every replica gets the same sums.
//
// Data with replicas: the step's batch is training.batch_size rows (as one
// replica would train); replica q of d takes rows [q*B/d, (q+1)*B/d) of it
// and cuts them into its microbatches. Its loss is its slice's mean; the
// step's loss (LastLoss) is the mean over the replicas, so it equals the
// full batch's mean loss.
//
// A non-finite loss (or gradient norm, with clipping): EndStep returns
// OUT_OF_RANGE naming the step on every rank, or, with
// `skip_nonfinite_steps`, skips that step's update on every rank (the ranks
// agree through the transport). Transport errors keep their codes
// (UNAVAILABLE, DEADLINE_EXCEEDED); a step abandoned by the runtime is
// simply run again (BeginStep drops its leftovers).
//
// Thread safety: one thread drives an executor (the runtime's).
#ifndef PIPEPLAN_WORKER_TORCH_EXECUTOR_H_
#define PIPEPLAN_WORKER_TORCH_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeplan/client/model_package.h"
#include "pipeplan/worker/package/checkpoint.h"
#include "pipeplan/worker/package/state_pack.h"
#include "pipeplan/worker/package/state_transfer.h"
#include "pipeplan/worker/runtime/executor.h"
#include "pipeplan/worker/transport/transport.h"

namespace pipeplan::worker {

struct OptimizerOptions {
  std::string kind = "sgd";  // "sgd", "adam", "adamw"
  double lr = 1e-3;
  double momentum = 0;  // sgd only
  // Default: 0 for sgd and adam, 0.01 for adamw (as PyTorch).
  std::optional<double> weight_decay;
  // > 0: clip the global L2 norm of all gradients to this (torch.nn.utils.clip_grad_norm_).
  double clip_grad_norm = 0;
};

struct TorchExecutorOptions {
  ModelPackage package;
  CompiledStages stages;
  // The plan's placement: stage s runs on rank stage_to_rank[s].
  std::vector<int> stage_to_rank;
  int rank = 0;
  // This executor's data-parallel replica and the plan's replicas.
  int replica = 0;
  int num_replicas = 1;
  int num_microbatches = 1;  // per replica
  // "tensors:FILE" or "synthetic:seed=N"; only the ranks of the first and
  // last stage read it.
  std::string data;
  std::string loss;  // "cross_entropy" or "mse"; empty: the package's
  OptimizerOptions optimizer;
  bool skip_nonfinite_steps = false;
  // "float32" (the package's own) or "float64": floating parameters, buffers,
  // inputs and boundary tensors are converted (the reference trainer's
  // --dtype float64), for comparisons tighter than float32 allows.
  std::string dtype = "float32";
  // The job's seed (TrainingSpec.seed): random operators draw from (seed,
  // step, microbatch) and their node (client/python/pipeplan/rng.py).
  int64_t seed = 0;
  // "cpu" or "cuda:N" (the worker's device mapping, env/torch_device_map.h):
  // parameters, optimizer state, activations, gradients and the loss live
  // there; a CUDA device that does not exist is FAILED_PRECONDITION.
  // Boundary buffers: device memory when `transport` takes it
  // (TakesDeviceBuffers, NCCL), else host memory, pinned on a GPU.
  std::string device = "cpu";
  // Deterministic algorithms for the whole process (torch's setting is
  // global): a CUDA run repeats exactly. Float32 on CUDA is always true
  // float32 (TF32 off), as the plan's cost model and the reference assume.
  bool deterministic = false;
  // Per stage (empty: none): the plan has the stage recompute. Its forward
  // then runs without autograd, keeping only its inputs (and the RNG
  // state), and its backward first runs the forward again with autograd
  // (activation checkpointing, torch.utils.checkpoint's way): the same
  // gradients for the memory of the inputs instead of every activation.
  std::vector<bool> recompute;
  // With replicas: gradient bytes per all-reduce bucket. A parameter's
  // gradient joins its bucket as the last microbatch's backward produces
  // it; a full bucket is reduced (a ring over replica_group, on a thread of
  // the executor) while the backward goes on, and EndStep waits for the
  // buckets before the optimizer step. <= 0: one all-reduce of every
  // gradient, started at EndStep (nothing overlapped).
  double allreduce_bucket_bytes = 25.0 * (1 << 20);
  // Carries EndStep's reductions and checkpoint barriers; may be null with a
  // single rank. Must outlive the executor (or be replaced by set_transport).
  Transport* transport = nullptr;
  // This rank in every replica (group rank = replica): the gradient
  // all-reduce and the loss's mean. Needed with several replicas.
  Transport* replica_group = nullptr;
  absl::Duration comm_timeout = absl::Seconds(60);
};

class TorchExecutor final : public Executor {
 public:
  // Loads this rank's stages (stage_<s>.pt) and the package's initial
  // parameters, opens the data. INVALID_ARGUMENT naming the part that is
  // wrong (options, a stage file, a parameter, the data file's shapes or
  // dtypes), NOT_FOUND for missing files, FAILED_PRECONDITION for a device
  // the host lacks, INTERNAL for what LibTorch itself refused.
  static absl::StatusOr<std::unique_ptr<TorchExecutor>> Create(TorchExecutorOptions options);
  ~TorchExecutor() override;
  TorchExecutor(const TorchExecutor&) = delete;
  TorchExecutor& operator=(const TorchExecutor&) = delete;

  absl::Status BeginStep(int64_t step) override;
  absl::Status Compute(const schedule::Action& action) override;
  absl::StatusOr<std::span<const std::byte>> SendBuffer(const schedule::Action& send) override;
  absl::StatusOr<std::span<std::byte>> RecvBuffer(const schedule::Action& recv) override;
  // Frees the send's buffer (a stage's memory then holds no boundary
  // buffers past its backward; the peak model counts none).
  void SendDone(const schedule::Action& send) override;
  absl::Status EndStep() override;
  // On a GPU: the CUDA caching allocator's peak of allocated bytes since
  // Create (all of autograd's memory included). On the CPU the peak of the
  // tensor bytes this executor's calls allocated and still held, counted at
  // LibTorch's CPU allocator (src/torch/cpu_memory_account.h): parameters,
  // gradients, optimizer state, saved activations, buffers, op temporaries;
  // from the end of Create (loading's transient copies left out).
  // PeakMemorySource says which.
  double PeakMemoryBytes() const override;
  // With replicas: the seconds of the last EndStep spent waiting for the
  // gradient all-reduce (what backward did not hide); nullopt without.
  std::optional<double> LastExposedAllReduceSeconds() const override;
  std::string PeakMemorySource() const override;
  // On a GPU the last Compute's time by CUDA events; nullopt on the CPU.
  std::optional<double> LastComputeSeconds() const override;
  // LibTorch's intra-op threads on the CPU; 0 on a GPU.
  int CpuComputeThreads() const override;
  // W is torch::autograd::backward to the parameters after I's
  // autograd::grad to the inputs: the graph is traversed twice.
  bool WeightPassRepeatsBackward() const override { return true; }
  // The step's loss (the batch's mean loss, over every replica's slice) on
  // the rank of the last stage.
  std::optional<double> LastLoss() const override;
  // True when the last EndStep skipped a non-finite step.
  bool LastStepSkipped() const;

  void set_transport(Transport* transport);

  // Canonical parameter name -> the ranks holding it under this executor's plan.
  const ParameterOwners& owners() const;

  // This rank's parameters and optimizer state, one tensor record per
  // canonical name (package/tensor_record.h: the parameter and its
  // optimizer state as raw bytes, labelled with the optimizer). Between
  // steps only.
  absl::StatusOr<NamedState> ExportState() const;
  // The same records in one state pack, built in place in `into` (its memory
  // reused when the size is unchanged): a peer snapshot's export. Tensors
  // on a GPU are copied to the pack's host memory.
  absl::Status ExportPack(StatePack& into) const;
  // The size ExportPack's pack will have (no copy).
  absl::StatusOr<size_t> PackBytes() const;
  // Overwrites the named parameters (values copied into the existing
  // tensors) and their optimizer state. INVALID_ARGUMENT for a name this
  // rank does not hold, a shape/dtype mismatch or another optimizer's state;
  // FAILED_PRECONDITION when a name this rank holds is missing (`complete`).
  absl::Status ImportState(const NamedStateView& state, bool complete = true);
  absl::Status ImportState(const NamedState& state, bool complete = true);

  // Writes this rank's shard (the parameters it is the lowest owner of, with
  // their optimizer state) to <dir>/shard_<rank>.bin atomically: one state
  // pack, one write.
  absl::Status WriteCheckpointShard(const std::string& dir, const CheckpointMeta& meta) const;
  // Every rank writes its shard; after a barrier over the transport rank 0
  // writes MANIFEST.json. All ranks return the same status.
  absl::Status WriteCheckpoint(const std::string& dir, const CheckpointMeta& meta);
  // Loads the parameters this rank holds from the shards of a complete
  // checkpoint (written under any plan, format 1 or 2) and returns its
  // meta. NOT_FOUND for an incomplete checkpoint or a parameter in no shard;
  // INVALID_ARGUMENT for another package or optimizer; FAILED_PRECONDITION
  // naming the format for a manifest of a format this worker cannot read.
  absl::StatusOr<CheckpointMeta> LoadCheckpoint(const std::string& dir);

  // The implementation's state, defined in src/torch_executor_impl.h (its
  // translation units share it).
  struct Impl;

 private:
  static absl::StatusOr<std::unique_ptr<TorchExecutor>> CreateOnDevice(
      TorchExecutorOptions options);
  explicit TorchExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_TORCH_EXECUTOR_H_
