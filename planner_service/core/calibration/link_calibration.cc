#include "pipeplan/core/link_calibration.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeplan/common/enum_names.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/schedule/action.h"

namespace pipeplan {
namespace {

constexpr auto kScopeNames =
    MakeEnumNames<LinkScope>("pair", {{LinkScope::kPair, "pair"},
                                      {LinkScope::kSameHost, "same_host"},
                                      {LinkScope::kCrossHost, "cross_host"}});

using schedule::ActionType;

// Blocked RECVs shorter than this did not really wait: their completion time
// is the wait's call, not the data's arrival.
constexpr double kMinBlockedSeconds = 20e-6;
// ClusterSpec reads a class latency of 0 as "the default": a fitted zero is
// written as this instead.
constexpr double kZeroLatency = 1e-9;

// (step, forward?, boundary, microbatch): both ends of one transfer.
using TransferKey = std::tuple<int64_t, bool, int, int>;

struct End {
  std::string device;
  double bytes = 0;
  int64_t post_us = 0;
  int64_t complete_us = 0;
  double wait = 0;
};

// The key of a SEND or RECV, or nullopt for anything else. Boundary b lies
// between stages b and b + 1.
std::optional<std::pair<TransferKey, bool>> KeyOf(int64_t step, const schedule::Action& a) {
  switch (a.type) {
    case ActionType::kSendF:
      return std::pair{TransferKey{step, true, a.stage, a.microbatch}, true};
    case ActionType::kRecvF:
      return std::pair{TransferKey{step, true, a.stage - 1, a.microbatch}, false};
    case ActionType::kSendB:
      return std::pair{TransferKey{step, false, a.stage - 1, a.microbatch}, true};
    case ActionType::kRecvB:
      return std::pair{TransferKey{step, false, a.stage, a.microbatch}, false};
    default:
      return std::nullopt;
  }
}

// Least squares of seconds on bytes over `t[i]` for i in `keep`.
struct Line {
  double latency = 0;
  double bandwidth = 0;
};

std::optional<Line> FitLine(std::span<const TransferSample> t, const std::vector<size_t>& keep,
                            double modelled_latency) {
  if (keep.empty()) return std::nullopt;
  std::vector<double> bytes, seconds;
  for (size_t i : keep) {
    bytes.push_back(t[i].bytes);
    seconds.push_back(t[i].seconds);
  }
  const auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
  const bool one_size = *hi <= *lo * 1.05;
  if (!one_size) {
    double mb = 0, ms = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      mb += bytes[i];
      ms += seconds[i];
    }
    mb /= bytes.size();
    ms /= bytes.size();
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      sxx += (bytes[i] - mb) * (bytes[i] - mb);
      sxy += (bytes[i] - mb) * (seconds[i] - ms);
    }
    const double slope = sxy / sxx;
    const double intercept = ms - slope * mb;
    if (slope > 0 && intercept >= 0) return Line{intercept, 1 / slope};
    if (slope > 0) {
      // Negative intercept: no latency, the line through the origin.
      double sxs = 0, sbb = 0;
      for (size_t i = 0; i < bytes.size(); ++i) {
        sxs += bytes[i] * seconds[i];
        sbb += bytes[i] * bytes[i];
      }
      if (sxs > 0) return Line{0, sbb / sxs};
    }
    // Time does not grow with size: fall through to one size.
  }
  const double b = MedianOr(bytes, 0), s = MedianOr(seconds, 0);
  const double latency = std::clamp(modelled_latency, 0.0, s / 2);
  if (!(s - latency > 0) || !(b > 0)) return std::nullopt;
  return Line{latency, b / (s - latency)};
}

}  // namespace

std::string_view LinkScopeName(LinkScope scope) { return kScopeNames.Name(scope); }

absl::StatusOr<LinkScope> ParseLinkScope(std::string_view name) {
  if (auto scope = kScopeNames.Parse(name, NameCase::kExact)) return *scope;
  return absl::InvalidArgumentError(
      absl::StrCat("link scope \"", std::string(name), "\" is not pair, same_host or cross_host"));
}

const FittedLink* LinkCalibration::Find(const std::string& src, const std::string& dst,
                                        bool same_host) const {
  const FittedLink* by_class = nullptr;
  const LinkScope cls = same_host ? LinkScope::kSameHost : LinkScope::kCrossHost;
  for (const FittedLink& l : links) {
    if (l.scope == LinkScope::kPair && l.src_device == src && l.dst_device == dst) return &l;
    if (l.scope == cls) by_class = &l;
  }
  return by_class;
}

std::vector<TransferSample> PairTransfers(std::span<const StepSample> samples, double max_seconds) {
  std::map<TransferKey, End> sends, recvs;
  for (const StepSample& r : samples) {
    for (const TimingSample& t : r.timings) {
      if (t.post_unix_us <= 0) continue;
      absl::StatusOr<std::optional<schedule::Action>> a = schedule::ParseAction(t.action);
      if (!a.ok() || !*a) continue;
      const auto key = KeyOf(r.step, **a);
      if (!key) continue;
      End end{r.device_id, t.bytes, t.post_unix_us, t.complete_unix_us, t.wait_seconds};
      (key->second ? sends : recvs)[key->first] = std::move(end);
    }
  }
  std::vector<TransferSample> out;
  for (const auto& [key, recv] : recvs) {
    if (recv.wait < kMinBlockedSeconds || recv.complete_us <= 0) continue;
    auto send = sends.find(key);
    if (send == sends.end()) continue;
    const int64_t start = std::max(send->second.post_us, recv.post_us);
    const double seconds = static_cast<double>(recv.complete_us - start) * 1e-6;
    if (!(seconds > 0) || seconds > max_seconds) continue;
    out.push_back({send->second.device, recv.device, recv.bytes, seconds});
  }
  return out;
}

absl::StatusOr<FittedLink> FitLink(std::span<const TransferSample> transfers,
                                   double modelled_latency, const LinkFitOptions& options) {
  std::vector<size_t> keep;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const TransferSample& t = transfers[i];
    if (t.bytes > 0 && t.seconds > 0 && t.seconds <= options.max_seconds &&
        std::isfinite(t.bytes)) {
      keep.push_back(i);
    }
  }
  const std::vector<size_t> given = keep;
  std::optional<Line> line = FitLine(transfers, keep, modelled_latency);
  // Reject outliers by their residual's distance from the median residual,
  // then refit; twice is enough for the heavy tail of a shared machine.
  for (int round = 0; round < 2 && line; ++round) {
    std::vector<double> residual;
    for (size_t i : keep) {
      residual.push_back(transfers[i].seconds -
                         (line->latency + transfers[i].bytes / line->bandwidth));
    }
    const double mid = MedianOr(residual, 0);
    std::vector<double> dev;
    for (double r : residual) dev.push_back(std::abs(r - mid));
    const double mad = 1.4826 * MedianOr(dev, 0);
    if (!(mad > 0)) break;
    std::vector<size_t> inliers;
    for (size_t k = 0; k < keep.size(); ++k) {
      if (std::abs(residual[k] - mid) <= options.mad_cutoff * mad) inliers.push_back(keep[k]);
    }
    if (inliers.size() == keep.size()) break;
    keep = std::move(inliers);
    line = FitLine(transfers, keep, modelled_latency);
  }
  if (!line || !(line->bandwidth > 0) || !std::isfinite(line->bandwidth)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no positive bandwidth explains ", transfers.size(), " transfers"));
  }
  double excess = 0;
  for (size_t i : given) {
    excess += transfers[i].seconds - (line->latency + transfers[i].bytes / line->bandwidth);
  }
  return FittedLink{.latency = line->latency,
                    .bandwidth = line->bandwidth,
                    .samples = static_cast<int>(keep.size()),
                    .tail = excess / static_cast<double>(given.size())};
}

LinkCalibration FitLinks(std::span<const TransferSample> transfers, const ClusterSpec& cluster,
                         const LinkFitOptions& options) {
  std::map<std::string, std::string> host;
  for (const DeviceSpec& d : cluster.devices) host[d.id] = d.host;
  auto latency_of = [&](bool same_host) {
    const double l = same_host ? cluster.intra_host_latency : cluster.inter_host_latency;
    return l > 0 ? l : same_host ? kDefaultIntraHostLatency : kDefaultInterHostLatency;
  };
  std::map<std::pair<std::string, std::string>, std::vector<TransferSample>> by_pair;
  std::vector<TransferSample> same, cross;
  for (const TransferSample& t : transfers) {
    auto s = host.find(t.src_device), d = host.find(t.dst_device);
    if (s == host.end() || d == host.end() || t.src_device == t.dst_device) continue;
    by_pair[{t.src_device, t.dst_device}].push_back(t);
    (s->second == d->second ? same : cross).push_back(t);
  }
  const int need = std::max(1, options.min_samples);
  LinkCalibration out;
  for (const auto& [pair, v] : by_pair) {
    if (static_cast<int>(v.size()) < need) continue;
    const bool same_host = host[pair.first] == host[pair.second];
    absl::StatusOr<FittedLink> fit = FitLink(v, latency_of(same_host), options);
    if (!fit.ok()) continue;
    fit->src_device = pair.first;
    fit->dst_device = pair.second;
    out.links.push_back(*std::move(fit));
  }
  for (const auto& [scope, v] :
       {std::pair{LinkScope::kSameHost, &same}, std::pair{LinkScope::kCrossHost, &cross}}) {
    if (static_cast<int>(v->size()) < need) continue;
    absl::StatusOr<FittedLink> fit =
        FitLink(*v, latency_of(scope == LinkScope::kSameHost), options);
    if (!fit.ok()) continue;
    fit->scope = scope;
    out.links.push_back(*std::move(fit));
  }
  return out;
}

absl::StatusOr<ClusterSpec> ApplyLinkCalibration(const ClusterSpec& spec,
                                                 const LinkCalibration& links) {
  ClusterSpec out = spec;
  for (const FittedLink& l : links.links) {
    if (!(l.bandwidth > 0) || !std::isfinite(l.bandwidth) || !(l.latency >= 0) ||
        !std::isfinite(l.latency) || !std::isfinite(l.tail)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fitted link ", l.src_device, "->", l.dst_device, " (",
                       std::string(LinkScopeName(l.scope)), ") has bandwidth ", l.bandwidth,
                       ", latency ", l.latency, " and tail ", l.tail));
    }
    const double latency = std::max(0.0, l.latency + l.tail);
    switch (l.scope) {
      case LinkScope::kSameHost:
        out.intra_host_bandwidth = l.bandwidth;
        out.intra_host_latency = std::max(latency, kZeroLatency);
        break;
      case LinkScope::kCrossHost:
        out.inter_host_bandwidth = l.bandwidth;
        out.inter_host_latency = std::max(latency, kZeroLatency);
        break;
      case LinkScope::kPair: {
        auto it = std::find_if(out.links.begin(), out.links.end(), [&](const LinkSpec& s) {
          return s.src == l.src_device && s.dst == l.dst_device;
        });
        const LinkSpec fitted{l.src_device, l.dst_device, l.bandwidth, latency};
        if (it == out.links.end()) {
          out.links.push_back(fitted);
        } else {
          *it = fitted;
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace pipeplan
