// What training keeps in device memory besides activations, by optimizer
// and precision: the bytes of weights, gradients and optimizer state per
// parameter byte of the graph, the size of activations and transferred
// tensors, and the gradient bytes a data-parallel all-reduce moves.
//
// Graph byte counts describe tensors of Graph::element_bytes() bytes per
// element (4 for a float32 export, 2 for bf16). Per parameter element:
//   fp32:        weights 4 + gradients 4                      + optimizer state
//   bf16-mixed:  weights 2 + gradients 2 + fp32 master copy 4 + optimizer state
//   fp64:        weights 8 + gradients 8                      + optimizer state
// with optimizer state sgd 0, momentum 4 (one fp32 buffer), adam 8 (two fp32
// moments); in fp64 the buffers are fp64 too (momentum 8, adam 16), as
// PyTorch's optimizers keep their state in the parameters' dtype. fp64 is
// what the torch executor runs for a job whose training.dtype is float64. Both precisions hold 16
// bytes per parameter with Adam (4x an fp32 graph's parameter bytes); activations, transfers and
// the gradients an all-reduce moves take 4 bytes per element in fp32 and 2 in bf16-mixed.
//
// Thread safety: plain functions on values.
#ifndef PIPEPLAN_CORE_MEMORY_MODEL_H_
#define PIPEPLAN_CORE_MEMORY_MODEL_H_

#include <string_view>

#include "absl/status/statusor.h"

namespace pipeplan {

enum class Optimizer { kSgd, kMomentum, kAdam };
enum class Precision { kFp32, kBf16Mixed, kFp64 };

// The defaults are what a PyTorch user training with AdamW in bf16 gets.
inline constexpr Optimizer kDefaultOptimizer = Optimizer::kAdam;
inline constexpr Precision kDefaultPrecision = Precision::kBf16Mixed;

std::string_view OptimizerName(Optimizer optimizer);
std::string_view PrecisionName(Precision precision);
// "sgd", "momentum", "adam" (also "adamw"); INVALID_ARGUMENT otherwise.
absl::StatusOr<Optimizer> ParseOptimizer(std::string_view name);
// "fp32", "bf16-mixed" (also "bf16"), "fp64"; INVALID_ARGUMENT otherwise.
absl::StatusOr<Precision> ParsePrecision(std::string_view name);

struct TrainingMemory {
  // Bytes a stage keeps per graph parameter byte: weights, gradients and
  // optimizer state.
  double param_state_factor = 4;
  // Bytes of activations and transferred tensors per graph byte.
  double tensor_scale = 0.5;
  // Gradient bytes an all-reduce moves per graph parameter byte.
  double gradient_scale = 0.5;
};

// For a graph of `element_bytes` per element. `state_multiplier_override`
// > 0 replaces the optimizer's state (bytes per parameter byte beyond weights
// and gradients), as PlanOptions' optimizer_state_multiplier always did.
TrainingMemory TrainingMemoryFor(Optimizer optimizer, Precision precision,
                                 double state_multiplier_override = 0, int element_bytes = 4);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_MEMORY_MODEL_H_
