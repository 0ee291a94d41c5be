// Training data of the torch executor (private to pipeplan_torch_executor;
// includes LibTorch). Definitions as in docs/model-package.md and
// client/python/pipeplan_data.py, whose numbers the executor reproduces:
//
// "tensors:FILE": a torch.save'd {"inputs": T or [T, ...], "targets": T} (or
// a bare list of inputs, which the losses reject: they need targets), N
// rows along dim 0. Step s trains rows (s*B + i) mod N, i < B.
// "synthetic:seed=N": step s draws its batch from a CPU generator seeded
// with N * 2^32 + s: each input in manifest order, then the targets.
//
// Microbatch m of M holds rows [m*B/M, (m+1)*B/M) of the step's batch
// (inputs along the package's batch_dim, targets along dim 0). With d
// data-parallel replicas, replica q's microbatch m of M holds rows
// q*B/d + [m*b, (m+1)*b), b = B/(d*M): replica q trains the q-th slice.
#ifndef PIPEPLAN_WORKER_SRC_TORCH_DATA_H_
#define PIPEPLAN_WORKER_SRC_TORCH_DATA_H_

#include <torch/script.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/client/model_package.h"

namespace pipeplan::worker {

class TrainingData {
 public:
  // INVALID_ARGUMENT naming the file and the tensor whose shape or dtype does
  // not fit the model or the loss, or a spec that is neither form; NOT_FOUND
  // for a missing file. `package` must outlive the data. `batch_size` is
  // the step's batch over all `replicas`; this data serves `replica`.
  static absl::StatusOr<TrainingData> Open(const std::string& spec, const ModelPackage& package,
                                           const std::string& loss, int64_t batch_size,
                                           int replica = 0, int replicas = 1);

  // Microbatch `m` of `microbatches` of this replica's slice of step
  // `step`: the model's inputs in package order, and the targets. Not
  // thread-safe (caches the last batch).
  std::vector<torch::Tensor> Inputs(int64_t step, int m, int microbatches);
  torch::Tensor Targets(int64_t step, int m, int microbatches);

 private:
  void LoadBatch(int64_t step);

  const ModelPackage* package_ = nullptr;
  std::string loss_;
  int64_t batch_size_ = 0;
  int replica_ = 0;
  int replicas_ = 1;
  // Rows [first, first + rows) of the batch of microbatch m of microbatches.
  std::pair<int64_t, int64_t> Rows(int m, int microbatches) const;
  // tensors:FILE
  std::vector<torch::Tensor> inputs_;
  torch::Tensor targets_;
  int64_t rows_ = 0;
  // synthetic:seed=N
  std::optional<int64_t> seed_;
  // The batch of step `batch_step_`.
  int64_t batch_step_ = -1;
  std::vector<torch::Tensor> batch_inputs_;
  torch::Tensor batch_targets_;
};

// torch dtype of a manifest dtype name; nullopt when unknown.
std::optional<torch::ScalarType> ScalarTypeOf(const std::string& dtype);
std::string DTypeName(torch::ScalarType type);
// "[2, 3]": a shape as error messages print it.
std::string ShapeString(torch::IntArrayRef shape);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_TORCH_DATA_H_
