#include "replan_reasons.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pipeplan::server {
namespace {

// "2.0x slower" / "2.0x faster": a time factor as a reader compares it.
std::string Ratio(double rel) {
  return rel >= 1 ? absl::StrFormat("%.1fx slower", rel) : absl::StrFormat("%.1fx faster", 1 / rel);
}

// "workers w1, w2 lost (devices d1, d2)", left or lost or left.
std::string LostReason(const LostDevices& lost) {
  const char* what = lost.left.size() == lost.workers.size() ? " left"
                     : lost.left.empty()                     ? " lost"
                                                             : " lost or left";
  return absl::StrCat(lost.workers.size() == 1 ? "worker " : "workers ",
                      absl::StrJoin(lost.workers, ", "), what, " (device",
                      lost.lost.size() == 1 ? " " : "s ", absl::StrJoin(lost.lost, ", "), ")");
}

// "device d3 has a live worker again".
std::string JoinedReason(const std::set<std::string>& joined) {
  return absl::StrCat(joined.size() == 1 ? "device " : "devices ", absl::StrJoin(joined, ", "),
                      joined.size() == 1 ? " has" : " have", " a live worker again");
}

// The device furthest from the median, named against the model when the
// median matches it and against the median device otherwise.
std::string CalibrationReason(const CalibrationResult& est) {
  const DeviceFactor* worst = nullptr;
  double worst_dev = -1;
  for (const DeviceFactor& f : est.devices) {
    const double dev = std::abs(std::log(f.time_factor / est.median_factor));
    if (dev > worst_dev) {
      worst_dev = dev;
      worst = &f;
    }
  }
  const double median = est.median_factor;
  if (worst == nullptr) return "calibration";
  if (std::abs(std::log(median)) < std::log(1.05)) {
    return absl::StrCat("calibration: device ", worst->device_id, " is ", Ratio(worst->time_factor),
                        " than modelled");
  }
  if (worst_dev < std::log(1.05)) {
    return absl::StrFormat("calibration: devices run %.2fx the modelled time", median);
  }
  return absl::StrFormat(
      "calibration: device %s is %s than the median device (which runs "
      "%.2fx the modelled time)",
      worst->device_id, Ratio(worst->time_factor / median), median);
}

}  // namespace

// "gpu0:1.000,gpu1:2.010": what a replan_skipped log line carries.
std::string FactorsText(const CalibrationResult& est) {
  std::string text;
  for (const DeviceFactor& f : est.devices) {
    absl::StrAppendFormat(&text, "%s%s:%.3f", text.empty() ? "" : ",", f.device_id, f.time_factor);
  }
  return text;
}

// The published version's reason: why, then the predicted step before and after.
std::string VersionReason(ReplanTrigger trigger, const CalibrationResult& est,
                          const std::set<std::string>& joined, const LostDevices& lost,
                          const ReplanOutcome& outcome) {
  const std::string why = trigger == ReplanTrigger::kCalibration    ? CalibrationReason(est)
                          : trigger == ReplanTrigger::kWorkerJoined ? JoinedReason(joined)
                                                                    : LostReason(lost);
  return absl::StrCat(why, absl::StrFormat("; predicted step %.4g s -> %.4g s",
                                           outcome.current_step_seconds, outcome.new_step_seconds));
}

}  // namespace pipeplan::server
