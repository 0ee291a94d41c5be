// Calibration of the cluster's links from measured transfers.
//
// Workers stamp every SEND and RECV with its wall-clock post and completion
// times (system clock). A transfer on a link lasts from the moment both ends
// were posted to the moment the RECV's wait returned:
//   seconds = recv.complete - max(send.post, recv.post).
// That is exact when the RECV blocked (its wait returned when the data
// landed); a RECV that did not block had its data earlier, so only blocked
// RECVs are paired. Both ends on one host share the clock; across hosts the
// figure is as good as the hosts' clock sync (NTP: well under a millisecond),
// and pairs with a non-positive or absurd duration are dropped.
//
// FitLinks fits seconds = latency + bytes / bandwidth per directed device
// pair, and per link class (same host, cross host) over all pairs of that
// class, for pairs with too few transfers of their own. The fit is least
// squares, then drops transfers whose residual is beyond `mad_cutoff`
// median absolute deviations and fits again. When the transfers have one
// distinct size (a uniform chain) latency and bandwidth cannot be told
// apart: the modelled latency is kept and only the bandwidth is fitted, which
// predicts transfers of that size exactly.
//
// The line is a typical transfer (one size: the median time), but a step
// waits for every transfer, the slow ones included. On a shared host
// transfers have a heavy right tail (a receiver that wakes late, transfers
// contending for the same cores) that outlier rejection leaves out of the
// line (3-20% of the transfers in the fidelity runs, 7-40% of the mean
// time). So each fit also carries its tail: the mean of (measured - line)
// over every transfer the fit was given, rejected ones included, so that
// latency + tail + bytes / bandwidth is the mean transfer time. Rejection
// keeps the line's shape robust; the tail keeps the expected time honest.
//
// ApplyLinkCalibration writes the fits into a ClusterSpec: fitted pairs as
// explicit links, class fits as the intra- or inter-host defaults.
//
// Plain structs only (no protobuf); reentrant.
#ifndef PIPEPLAN_CORE_LINK_CALIBRATION_H_
#define PIPEPLAN_CORE_LINK_CALIBRATION_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/cluster.h"

namespace pipeplan {

// One transfer on a link, timed from both ends.
struct TransferSample {
  std::string src_device;
  std::string dst_device;
  double bytes = 0;
  double seconds = 0;
};

enum class LinkScope { kPair, kSameHost, kCrossHost };

// "pair", "same_host", "cross_host".
std::string_view LinkScopeName(LinkScope scope);
// INVALID_ARGUMENT for any other name.
absl::StatusOr<LinkScope> ParseLinkScope(std::string_view name);

struct FittedLink {
  LinkScope scope = LinkScope::kPair;
  std::string src_device;  // empty for a class
  std::string dst_device;
  double latency = 0;    // seconds
  double bandwidth = 0;  // bytes/s
  int samples = 0;       // transfers kept after outlier rejection
  // Mean excess of all the fit's transfers over the line (seconds).
  double tail = 0;

  double Seconds(double bytes) const { return latency + tail + bytes / bandwidth; }
};

struct LinkFitOptions {
  // A pair needs this many transfers for a fit of its own; a class needs
  // this many over its pairs.
  int min_samples = 8;
  // Residuals beyond this many MADs are outliers.
  double mad_cutoff = 3;
  // Durations above this are dropped before fitting (a stalled peer).
  double max_seconds = 60;
};

struct LinkCalibration {
  // Pairs sorted by (src, dst), then the classes.
  std::vector<FittedLink> links;

  // The pair's own fit, or its class's, or nullptr.
  const FittedLink* Find(const std::string& src, const std::string& dst, bool same_host) const;
};

// Pairs every blocked RECV with the SEND of the same step, boundary,
// direction and microbatch (SEND_F s m with RECV_F s+1 m, SEND_B s m with
// RECV_B s-1 m) across the reports of one plan version. `samples` need
// device_id; reports of one step are matched by their step number. Pairs
// with a non-positive duration or one above max_seconds are dropped.
std::vector<TransferSample> PairTransfers(std::span<const StepSample> samples,
                                          double max_seconds = 60);

// One link fitted from `transfers` (at least one). `modelled_latency` is kept
// when the transfers have a single size. INVALID_ARGUMENT when there are none
// or when no positive bandwidth explains them.
absl::StatusOr<FittedLink> FitLink(std::span<const TransferSample> transfers,
                                   double modelled_latency, const LinkFitOptions& options = {});

// Fits per pair and per class; the cluster gives hosts and modelled
// latencies. Transfers naming devices outside `cluster` are ignored. Pairs or
// classes whose fit fails are left out (they keep their modelled link).
LinkCalibration FitLinks(std::span<const TransferSample> transfers, const ClusterSpec& cluster,
                         const LinkFitOptions& options = {});

// `spec` with the fitted links applied: a pair fit replaces (or adds) the
// pair's explicit link; a class fit becomes that class's default bandwidth and
// latency. The tail is added to the latency (never below zero): the cluster
// model's links are latency + bytes / bandwidth. INVALID_ARGUMENT for a fit with a non-positive or
// non-finite bandwidth or a negative latency.
absl::StatusOr<ClusterSpec> ApplyLinkCalibration(const ClusterSpec& spec,
                                                 const LinkCalibration& links);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_LINK_CALIBRATION_H_
