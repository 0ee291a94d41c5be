#include "pipeplan/core/cluster.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pipeplan {
namespace {

absl::Status CheckPositive(double x, absl::string_view field) {
  if (!std::isfinite(x) || x <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be a positive number, got ", x));
  }
  return absl::OkStatus();
}

absl::Status CheckNonNegative(double x, absl::string_view field) {
  if (!std::isfinite(x) || x < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be a non-negative number, got ", x));
  }
  return absl::OkStatus();
}

// Device ids are unique and non-empty, flops and memory positive; returns
// each id's index.
absl::StatusOr<absl::flat_hash_map<std::string, int>> IndexDevices(
    const std::vector<DeviceSpec>& devices) {
  absl::flat_hash_map<std::string, int> index;
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceSpec& d = devices[i];
    const std::string where = absl::StrCat("cluster.devices[", i, "]");
    if (d.id.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ".id is empty"));
    if (auto [it, inserted] = index.emplace(d.id, static_cast<int>(i)); !inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".id \"", d.id, "\" is duplicated (first at cluster.devices[", it->second, "])"));
    }
    if (auto s = CheckPositive(d.flops, absl::StrCat(where, ".flops")); !s.ok()) return s;
    if (auto s = CheckPositive(d.memory_bytes, absl::StrCat(where, ".memory_bytes")); !s.ok()) {
      return s;
    }
  }
  return index;
}

// Each link's (src, dst) device indices, its ends and numbers checked.
absl::StatusOr<std::vector<std::pair<int, int>>> ResolveLinks(
    const std::vector<LinkSpec>& links, const absl::flat_hash_map<std::string, int>& index) {
  std::vector<std::pair<int, int>> resolved;
  for (size_t i = 0; i < links.size(); ++i) {
    const LinkSpec& l = links[i];
    const std::string where = absl::StrCat("cluster.links[", i, "]");
    auto src = index.find(l.src);
    if (src == index.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".src \"", l.src, "\" is not a device"));
    }
    auto dst = index.find(l.dst);
    if (dst == index.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".dst \"", l.dst, "\" is not a device"));
    }
    if (auto s = CheckPositive(l.bandwidth, absl::StrCat(where, ".bandwidth_bytes_per_second"));
        !s.ok()) {
      return s;
    }
    if (auto s = CheckNonNegative(l.latency, absl::StrCat(where, ".latency_seconds")); !s.ok()) {
      return s;
    }
    resolved.emplace_back(src->second, dst->second);
  }
  return resolved;
}

double OrDefault(double value, double fallback) { return value > 0 ? value : fallback; }

}  // namespace

absl::StatusOr<Cluster> Cluster::Build(ClusterSpec spec) {
  if (spec.devices.empty()) return absl::InvalidArgumentError("cluster.devices is empty");
  // The bandwidth and latency matrices have n^2 entries indexed in int.
  if (spec.devices.size() > kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.devices has ", spec.devices.size(),
                                                   " entries; at most ", kMaxDevices,
                                                   " are supported"));
  }
  const std::pair<double, const char*> defaults[] = {
      {spec.intra_host_bandwidth, "cluster.intra_host_bandwidth"},
      {spec.inter_host_bandwidth, "cluster.inter_host_bandwidth"},
      {spec.intra_host_latency, "cluster.intra_host_latency"},
      {spec.inter_host_latency, "cluster.inter_host_latency"}};
  for (const auto& [value, field] : defaults) {
    if (auto s = CheckNonNegative(value, field); !s.ok()) return s;
  }
  absl::StatusOr<absl::flat_hash_map<std::string, int>> index = IndexDevices(spec.devices);
  if (!index.ok()) return index.status();
  absl::StatusOr<std::vector<std::pair<int, int>>> resolved = ResolveLinks(spec.links, *index);
  if (!resolved.ok()) return resolved.status();

  Cluster c;
  for (const DeviceSpec& d : spec.devices) c.max_flops_ = std::max(c.max_flops_, d.flops);
  c.devices_ = std::move(spec.devices);
  const int n = c.num_devices();
  const double intra_bw = OrDefault(spec.intra_host_bandwidth, kDefaultIntraHostBandwidth);
  const double inter_bw = OrDefault(spec.inter_host_bandwidth, kDefaultInterHostBandwidth);
  const double intra_lat = OrDefault(spec.intra_host_latency, kDefaultIntraHostLatency);
  const double inter_lat = OrDefault(spec.inter_host_latency, kDefaultInterHostLatency);
  c.bandwidth_.resize(n * n);
  c.latency_.resize(n * n);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      const bool same_host = c.devices_[a].host == c.devices_[b].host;
      c.bandwidth_[a * n + b] = same_host ? intra_bw : inter_bw;
      c.latency_[a * n + b] = same_host ? intra_lat : inter_lat;
    }
  }
  // A link sets both directions unless the reverse direction is listed too,
  // so apply all links once symmetrically and then the directed ones again.
  c.own_links_.assign(n, 0);
  for (const auto& [a, b] : *resolved) c.own_links_[a] = c.own_links_[b] = 1;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < resolved->size(); ++i) {
      const auto [a, b] = (*resolved)[i];
      const int at = pass == 0 ? b * n + a : a * n + b;
      c.bandwidth_[at] = spec.links[i].bandwidth;
      c.latency_[at] = spec.links[i].latency;
    }
  }
  return c;
}

Cluster Cluster::FromResolved(std::vector<DeviceSpec> devices, std::vector<double> bandwidth,
                              std::vector<double> latency, double reference_flops) {
  Cluster c;
  c.devices_ = std::move(devices);
  c.bandwidth_ = std::move(bandwidth);
  c.latency_ = std::move(latency);
  c.own_links_.assign(c.devices_.size(), 1);
  c.max_flops_ = reference_flops;
  for (const DeviceSpec& d : c.devices_) c.max_flops_ = std::max(c.max_flops_, d.flops);
  return c;
}

}  // namespace pipeplan
