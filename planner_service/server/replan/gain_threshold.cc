#include "gain_threshold.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace pipeplan::server {

std::optional<std::string> GainWithinNoise(const GainEvidence& e, double noise_factor) {
  constexpr int kMinSteps = 5;
  if (e.measured_steps < kMinSteps || !(noise_factor > 0)) return std::nullopt;
  const double cur = e.current_step_seconds;
  if (!(cur > 0) || std::isinf(cur)) return std::nullopt;
  const double gain = (cur - e.new_step_seconds) / cur;
  const double threshold = e.noise_ratio * noise_factor;
  if (gain > threshold) return std::nullopt;
  return absl::StrFormat(
      "predicted gain %.1f%% is within the measured noise (%.1f%% over %d steps, x%.2g)",
      gain * 100, e.noise_ratio * 100, e.measured_steps, noise_factor);
}

}  // namespace pipeplan::server
