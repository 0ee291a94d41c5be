#include "pipeplan/core/memory_model.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pipeplan {

std::string_view OptimizerName(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kSgd:
      return "sgd";
    case Optimizer::kMomentum:
      return "momentum";
    case Optimizer::kAdam:
      return "adam";
  }
  return "unknown";
}

std::string_view PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16Mixed:
      return "bf16-mixed";
    case Precision::kFp64:
      return "fp64";
  }
  return "unknown";
}

absl::StatusOr<Optimizer> ParseOptimizer(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (lower == "sgd") return Optimizer::kSgd;
  if (lower == "momentum") return Optimizer::kMomentum;
  if (lower == "adam" || lower == "adamw") return Optimizer::kAdam;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer \"", lower, "\" (sgd, momentum, adam)"));
}

absl::StatusOr<Precision> ParsePrecision(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (lower == "fp32") return Precision::kFp32;
  if (lower == "bf16-mixed" || lower == "bf16") return Precision::kBf16Mixed;
  if (lower == "fp64") return Precision::kFp64;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision \"", lower, "\" (fp32, bf16-mixed, fp64)"));
}

TrainingMemory TrainingMemoryFor(Optimizer optimizer, Precision precision,
                                 double state_multiplier_override, int element_bytes) {
  const double element = element_bytes > 0 ? element_bytes : 4;
  // Optimizer state: fp32 buffers.
  double state_bytes = 0;
  switch (optimizer) {
    case Optimizer::kSgd:
      state_bytes = 0;
      break;
    case Optimizer::kMomentum:
      state_bytes = 4;
      break;
    case Optimizer::kAdam:
      state_bytes = 8;
      break;
  }
  // Weights and gradients: 4 + 4 in fp32; 2 + 2 + a 4-byte fp32 master copy
  // in bf16-mixed: the same 8 bytes per parameter, spent differently. fp64
  // doubles weights, gradients and the state buffers.
  const double working = precision == Precision::kFp32 ? 4 : precision == Precision::kFp64 ? 8 : 2;
  if (precision == Precision::kFp64) state_bytes *= 2;
  TrainingMemory m;
  m.param_state_factor = state_multiplier_override > 0
                             ? 2 + state_multiplier_override
                             : (2 * std::max(working, 4.0) + state_bytes) / element;
  m.tensor_scale = working / element;
  m.gradient_scale = working / element;
  return m;
}

}  // namespace pipeplan
