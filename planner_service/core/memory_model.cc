#include "pipeplan/core/memory_model.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "pipeplan/common/enum_names.h"

namespace pipeplan {

namespace {

// The first name of a value is the one it prints as; later ones are aliases
// the parser also accepts.
constexpr auto kOptimizerNames =
    MakeEnumNames<Optimizer>("unknown", {{Optimizer::kSgd, "sgd"},
                                         {Optimizer::kMomentum, "momentum"},
                                         {Optimizer::kAdam, "adam"},
                                         {Optimizer::kAdam, "adamw"}});
constexpr auto kPrecisionNames =
    MakeEnumNames<Precision>("unknown", {{Precision::kFp32, "fp32"},
                                         {Precision::kBf16Mixed, "bf16-mixed"},
                                         {Precision::kFp64, "fp64"},
                                         {Precision::kBf16Mixed, "bf16"}});

}  // namespace

std::string_view OptimizerName(Optimizer optimizer) { return kOptimizerNames.Name(optimizer); }

std::string_view PrecisionName(Precision precision) { return kPrecisionNames.Name(precision); }

absl::StatusOr<Optimizer> ParseOptimizer(std::string_view name) {
  return ParseEnumName(kOptimizerNames, "optimizer", name);
}

absl::StatusOr<Precision> ParsePrecision(std::string_view name) {
  return ParseEnumName(kPrecisionNames, "precision", name);
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
