#include "pipeplan/core/host_overhead.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "pipeplan/core/median.h"

namespace pipeplan {
namespace {

bool IsSend(const TimingSample& t) { return absl::StrContains(t.action, "SEND_"); }
bool IsRecv(const TimingSample& t) { return absl::StrContains(t.action, "RECV_"); }

// The values within `cutoff` MADs of their median (all of them when the MAD
// is 0: identical values are no outliers).
std::vector<double> WithoutOutliers(const std::vector<double>& v, double cutoff) {
  const double median = MedianOr(v, 0);
  std::vector<double> deviations;
  deviations.reserve(v.size());
  for (double x : v) deviations.push_back(std::abs(x - median));
  const double mad = MedianOr(deviations, 0);
  if (mad <= 0) return v;
  std::vector<double> kept;
  for (double x : v) {
    if (std::abs(x - median) <= cutoff * mad) kept.push_back(x);
  }
  return kept;
}

// Per direction: host seconds per message of each usable report.
struct PerReport {
  std::vector<double> send, recv;
};

// Adds `s`'s host seconds per SEND and per RECV (none without wall-clock
// stamps: the worker did not report its waits apart).
void AddReport(const StepSample& s, PerReport& out) {
  int sends = 0, recvs = 0;
  bool stamped = false;
  double send_host = 0, recv_host = 0;
  for (const TimingSample& t : s.timings) {
    const bool send = IsSend(t);
    if (!send && !IsRecv(t)) continue;
    (send ? sends : recvs) += 1;
    stamped = stamped || t.post_unix_us > 0;
    // Posting and waiting are charged to the action; the wait is not host time.
    const double posting = t.seconds - std::max(0.0, t.wait_seconds);
    if (std::isfinite(posting)) (send ? send_host : recv_host) += std::max(0.0, posting);
  }
  if (!stamped) return;
  if (sends > 0) out.send.push_back(send_host / sends);
  if (recvs > 0) out.recv.push_back(recv_host / recvs);
}

// The median of `values` without outliers; no fit below `min_samples`.
HostSeconds Fit(const std::vector<double>& values, const HostOverheadOptions& options) {
  if (values.empty() || static_cast<int>(values.size()) < std::max(1, options.min_samples)) {
    return {};
  }
  const std::vector<double> kept = WithoutOutliers(values, options.mad_cutoff);
  return {.seconds = MedianOr(kept, 0), .samples = static_cast<int>(kept.size())};
}

}  // namespace

double HostOverhead::SendSeconds(const std::string& device_id) const {
  auto it = devices.find(device_id);
  return it == devices.end() || it->second.send.samples == 0 ? default_send_seconds
                                                             : it->second.send.seconds;
}

double HostOverhead::RecvSeconds(const std::string& device_id) const {
  auto it = devices.find(device_id);
  return it == devices.end() || it->second.recv.samples == 0 ? default_recv_seconds
                                                             : it->second.recv.seconds;
}

HostOverhead FitHostOverhead(std::span<const StepSample> samples,
                             const HostOverheadOptions& options) {
  std::map<std::string, PerReport> per_device;
  for (const StepSample& s : samples) {
    if (!s.device_id.empty()) AddReport(s, per_device[s.device_id]);
  }
  HostOverhead out;
  std::vector<double> sends, recvs;
  for (const auto& [device, reports] : per_device) {
    const DeviceHostOverhead fit{.send = Fit(reports.send, options),
                                 .recv = Fit(reports.recv, options)};
    if (fit.send.samples == 0 && fit.recv.samples == 0) continue;
    out.devices[device] = fit;
    if (fit.send.samples > 0) sends.push_back(fit.send.seconds);
    if (fit.recv.samples > 0) recvs.push_back(fit.recv.seconds);
  }
  out.default_send_seconds = MedianOr(std::move(sends), 0);
  out.default_recv_seconds = MedianOr(std::move(recvs), 0);
  return out;
}

}  // namespace pipeplan
