// The devices a job may run on and the links between them. Cluster::Build
// validates the topology and resolves every device pair to a bandwidth and a
// latency: an explicit Link wins, otherwise the intra-host or inter-host
// default applies. The list order carries no meaning: the planner places
// stages by speed, memory and links (placement.h).
//
// Thread safety: a built Cluster is read-only and safe to share.
#ifndef PIPEPLAN_CORE_CLUSTER_H_
#define PIPEPLAN_CORE_CLUSTER_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pipeplan {

struct DeviceSpec {
  std::string id;
  std::string host;
  double flops = 0;         // sustained flop/s, > 0
  double memory_bytes = 0;  // > 0
};

struct LinkSpec {
  std::string src;
  std::string dst;
  double bandwidth = 0;  // bytes/s, > 0
  double latency = 0;    // seconds
};

struct ClusterSpec {
  std::vector<DeviceSpec> devices;
  std::vector<LinkSpec> links;
  double intra_host_bandwidth = 0;  // 0: kDefaultIntraHostBandwidth
  double inter_host_bandwidth = 0;
  double intra_host_latency = 0;
  double inter_host_latency = 0;
};

inline constexpr double kDefaultIntraHostBandwidth = 150e9;
inline constexpr double kDefaultInterHostBandwidth = 12.5e9;
inline constexpr double kDefaultIntraHostLatency = 5e-6;
inline constexpr double kDefaultInterHostLatency = 20e-6;

class Cluster {
 public:
  // Most devices Build accepts: the n^2 matrices stay within int indices
  // (and 4 GiB).
  static constexpr size_t kMaxDevices = 16'384;

  // Errors: INVALID_ARGUMENT naming the field (no devices, more than
  // kMaxDevices, duplicate or empty id, non-positive flops or memory, link to
  // an unknown device, bad numbers).
  static absl::StatusOr<Cluster> Build(ClusterSpec spec);
  // A cluster from resolved matrices (n x n, row = source), for derived
  // views such as the worst replica of a placement. `reference_flops` is the
  // speed measured node times refer to (the original cluster's max_flops).
  // REQUIRES: positive flops and memory, matrices of size n * n.
  static Cluster FromResolved(std::vector<DeviceSpec> devices, std::vector<double> bandwidth,
                              std::vector<double> latency, double reference_flops);

  int num_devices() const { return static_cast<int>(devices_.size()); }
  const DeviceSpec& device(int d) const { return devices_[d]; }
  double bandwidth(int a, int b) const { return bandwidth_[a * num_devices() + b]; }
  double latency(int a, int b) const { return latency_[a * num_devices() + b]; }
  // Whether Link overrides touch device d (it is then not interchangeable
  // with its host-mates).
  bool has_own_links(int d) const { return own_links_[d]; }
  // Seconds to move `bytes` from device a to device b; 0 on the same device.
  double TransferSeconds(int a, int b, double bytes) const {
    return a == b ? 0 : bytes / bandwidth(a, b) + latency(a, b);
  }
  // The speed measured node times refer to.
  double max_flops() const { return max_flops_; }

 private:
  std::vector<DeviceSpec> devices_;
  std::vector<double> bandwidth_, latency_;
  std::vector<char> own_links_;
  double max_flops_ = 0;
};

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_CLUSTER_H_
