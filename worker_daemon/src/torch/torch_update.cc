// TorchExecutor::EndStep: the step's update — the gradient all-reduce over
// replicas (in buckets started by gradient hooks during the last backward,
// or at once), the sums of tied parameters' gradients across ranks, the
// agreed clipping and skip decision, and the optimizer step.
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
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

using schedule::Action;
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

// Parameters in the order the backward finalises their gradients: stages
// from the last, each's parameters in reverse module order (the package's
// parameter order), a parameter two local stages share with the later one.
std::vector<std::pair<std::string, torch::Tensor>> BackwardOrder(const TorchExecutor::Impl& impl) {
  std::map<std::string, int> rank_of;  // package order
  for (const TensorSpec& p : impl.options.package.parameters) {
    rank_of.emplace(p.name, static_cast<int>(rank_of.size()));
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::set<std::string> seen;
  for (auto it = impl.stages.rbegin(); it != impl.stages.rend(); ++it) {
    std::vector<std::pair<int, std::string>> names;
    for (const auto& [name, p] : it->second.params) {
      if (!seen.insert(name).second) continue;
      auto r = rank_of.find(name);
      names.emplace_back(r == rank_of.end() ? -1 : r->second, name);
    }
    std::sort(names.rbegin(), names.rend());
    for (const auto& [r, name] : names) out.emplace_back(name, impl.params.at(name));
  }
  return out;
}

// The final gradient of `name` (used by local stage `s` only) as the last
// pass computes it: what .grad will hold once `grad` is accumulated.
void OnGradient(TorchExecutor::Impl& impl, int s, const std::string& name,
                const torch::Tensor& grad) {
  if (impl.final_pass_stage != s || !impl.buckets) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor& held = impl.params.at(name).grad();
  impl.buckets->Ready(name, held.defined() ? held + grad : grad);
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

// The replicas' mean gradient: the buckets' (waited for), or one all-reduce
// now; the seconds it waited are the step's exposed all-reduce.
absl::Status AllReduceGradients(TorchExecutor::Impl& impl) {
  impl.last_exposed_allreduce.reset();
  if (impl.options.num_replicas < 2 || impl.options.replica_group == nullptr) {
    return absl::OkStatus();
  }
  if (impl.buckets) {
    PIPEPLAN_ASSIGN_OR_RETURN(impl.last_exposed_allreduce, impl.buckets->Finish());
    return absl::OkStatus();
  }
  const auto t0 = std::chrono::steady_clock::now();
  PIPEPLAN_RETURN_IF_ERROR(AverageOverReplicas(impl));
  impl.last_exposed_allreduce =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return absl::OkStatus();
}

absl::Status ApplyUpdate(TorchExecutor::Impl& impl, std::optional<double> loss) {
  // Replicas first (EndStep reduced them): the tied sums then add identical
  // values on every rank.
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

void SetUpBuckets(TorchExecutor::Impl& impl) {
  const TorchExecutorOptions& o = impl.options;
  if (o.num_replicas < 2 || o.replica_group == nullptr || o.allreduce_bucket_bytes <= 0 ||
      impl.params.empty()) {
    return;
  }
  torch::ScalarType type = torch::kFloat32;
  for (const auto& [name, p] : impl.params) {
    if (p.scalar_type() == torch::kFloat64) type = torch::kFloat64;
  }
  // NCCL must be driven by one thread: its buckets run in EndStep.
  impl.buckets = std::make_unique<GradientBuckets>(
      BackwardOrder(impl), type,
      BucketOptions{.group = o.replica_group,
                    .replicas = o.num_replicas,
                    .bucket_bytes = o.allreduce_bucket_bytes,
                    .timeout = o.comm_timeout,
                    .threaded = o.replica_group->name() != "nccl"});
  // A parameter one local stage uses is final after that stage's last
  // pass; one that two share waits for EndStep.
  std::map<std::string, std::vector<int>> users;
  for (const auto& [s, stage] : impl.stages) {
    for (const auto& [name, p] : stage.params) users[name].push_back(s);
  }
  for (const auto& [name, stages] : users) {
    if (stages.size() != 1) continue;
    const int s = stages[0];
    TorchExecutor::Impl* self = &impl;
    impl.params.at(name).register_hook(
        [self, s, name](const torch::Tensor& grad) { OnGradient(*self, s, name, grad); });
  }
}

void BeginGradientPass(TorchExecutor::Impl& impl, int s) {
  const int passes = ++impl.gradient_passes[s];
  impl.final_pass_stage = passes == impl.options.num_microbatches ? s : -1;
}

void EndGradientPass(TorchExecutor::Impl& impl) { impl.final_pass_stage = -1; }

absl::Status TorchExecutor::EndStep() {
  Impl& impl = *impl_;
  CpuMemoryAccount::Scope charge(impl.memory.get());
  impl.last_skipped = false;
  std::optional<double> loss;
  // The buckets first: the loss's mean then has the replica group alone.
  absl::Status status = AllReduceGradients(impl);
  if (status.ok() && impl.IsLocal(impl.last_stage)) {
    absl::StatusOr<double> mean =
        MeanOverReplicas(impl, impl.step_loss.defined() ? impl.step_loss.item<double>() : 0.0);
    if (mean.ok()) loss = *mean;
    status = mean.status();
  }
  if (status.ok()) status = ApplyUpdate(impl, loss);
  // The optimizer's kernels are queued, not done: wait for them, so the
  // runtime's clock around EndStep times the update itself.
  if (impl.device.is_cuda()) torch::cuda::synchronize(impl.device.index());
  ClearStep(impl);
  if (loss) impl.last_loss = loss;
  return status;
}

}  // namespace pipeplan::worker

namespace pipeplan::worker {
std::optional<double> TorchExecutor::LastExposedAllReduceSeconds() const {
  return impl_->last_exposed_allreduce;
}
}  // namespace pipeplan::worker
