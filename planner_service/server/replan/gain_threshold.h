// The gain threshold of a calibration replan: does the predicted gain beat
// what the measurements cannot tell apart from noise?
//
// The other gates (replan_policy.cc, GainTooSmall) ask whether the gain
// pays: above a relative minimum, and above the switch's cost spread over
// the steps left. This one asks whether it is real. Steps of an unchanged
// plan vary by their noise: a plan predicted a few percent faster from
// factors fitted on noisy steps is as likely to be a fit of the noise, and a
// replan on it costs a switch and gains nothing. So the relative gain must
// be above the measured noise of the current version's steps ((p90 - p50) /
// p50 of their makespans) times `noise_factor`.
//
// Only calibration replans take this test: a lost or returning worker is a
// change of membership and replans whatever the noise.
#ifndef PIPEPLAN_SERVER_REPLAN_GAIN_THRESHOLD_H_
#define PIPEPLAN_SERVER_REPLAN_GAIN_THRESHOLD_H_

#include <optional>
#include <string>

namespace pipeplan::server {

struct GainEvidence {
  double current_step_seconds = 0;  // both under the calibrated model
  double new_step_seconds = 0;
  double noise_ratio = 0;  // (p90 - p50) / p50 of the current version's steps
  int measured_steps = 0;  // steps the noise was measured on
};

// Why the gain does not beat the noise (a sentence for the log), or nullopt
// when it does. Fewer than 5 measured steps give no noise estimate: the
// test passes and the other gates decide.
std::optional<std::string> GainWithinNoise(const GainEvidence& evidence, double noise_factor);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_GAIN_THRESHOLD_H_
