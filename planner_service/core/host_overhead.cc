#include "pipeplan/core/host_overhead.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"

namespace pipeplan {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool IsMessage(const TimingSample& t) {
  return absl::StrContains(t.action, "SEND_") || absl::StrContains(t.action, "RECV_");
}

// The values within `cutoff` MADs of their median (all of them when the MAD
// is 0: identical values are no outliers).
std::vector<double> WithoutOutliers(const std::vector<double>& v, double cutoff) {
  const double median = Median(v);
  std::vector<double> deviations;
  deviations.reserve(v.size());
  for (double x : v) deviations.push_back(std::abs(x - median));
  const double mad = Median(deviations);
  if (mad <= 0) return v;
  std::vector<double> kept;
  for (double x : v) {
    if (std::abs(x - median) <= cutoff * mad) kept.push_back(x);
  }
  return kept;
}

}  // namespace

double HostOverhead::MessageSeconds(const std::string& device_id) const {
  auto it = devices.find(device_id);
  return it == devices.end() ? default_message_seconds : it->second.message_seconds;
}

HostOverhead FitHostOverhead(std::span<const StepSample> samples,
                             const HostOverheadOptions& options) {
  std::map<std::string, std::vector<double>> per_message;
  for (const StepSample& s : samples) {
    if (s.device_id.empty()) continue;
    int messages = 0;
    bool stamped = false;
    double host = 0;
    for (const TimingSample& t : s.timings) {
      if (!IsMessage(t)) continue;
      ++messages;
      stamped = stamped || t.post_unix_us > 0;
      // Posting and waiting are charged to the action; the wait is not host time.
      const double posting = t.seconds - std::max(0.0, t.wait_seconds);
      if (std::isfinite(posting)) host += std::max(0.0, posting);
    }
    // Without wall-clock stamps the worker did not report its waits apart.
    if (messages == 0 || !stamped) continue;
    per_message[s.device_id].push_back(host / messages);
  }
  HostOverhead out;
  std::vector<double> fitted;
  for (const auto& [device, values] : per_message) {
    if (static_cast<int>(values.size()) < std::max(1, options.min_samples)) continue;
    const std::vector<double> kept = WithoutOutliers(values, options.mad_cutoff);
    const DeviceHostOverhead fit{.message_seconds = Median(kept),
                                 .samples = static_cast<int>(kept.size())};
    out.devices[device] = fit;
    fitted.push_back(fit.message_seconds);
  }
  out.default_message_seconds = Median(std::move(fitted));
  return out;
}

}  // namespace pipeplan
