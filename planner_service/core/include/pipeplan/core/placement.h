// Which device runs each (replica, rank) of a data-parallel pipeline, and
// the pieces the planner's placement search is built from.
//
// Nothing here depends on the order the cluster lists its devices: devices
// are ranked canonically (hosts by name, then faster and larger devices
// first, then id with digit runs compared as numbers), and devices that no
// cost can tell apart (same host, flops and memory, no link override of
// their own) form one class. A placement is then a grid of classes; the
// planner scores every distinct grid on small clusters (AllPlacements) and a
// few structured layouts improved by swaps on large ones (LayoutPlacements,
// SwapNeighbours).
//
// Thread safety: plain functions on values.
#ifndef PIPEPLAN_CORE_PLACEMENT_H_
#define PIPEPLAN_CORE_PLACEMENT_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pipeplan/core/cluster.h"

namespace pipeplan {

struct Placement {
  int ranks = 0;
  int replicas = 0;
  // Replica-major: devices[q * ranks + r] runs rank r of replica q.
  std::vector<int> devices;

  int device(int replica, int rank) const { return devices[replica * ranks + rank]; }
  // The devices of rank r in every replica, by replica: its all-reduce group.
  std::vector<int> Group(int rank) const;
  // The devices of replica q by rank: one pipeline.
  std::vector<int> Pipeline(int replica) const;
};

// Every device index, canonically ordered (see above).
std::vector<int> CanonicalDeviceOrder(const Cluster& cluster);

// Dense class ids, numbered in canonical order; interchangeable devices
// share one.
std::vector<int> DeviceClasses(const Cluster& cluster);

// What the placement functions below derive from a cluster, computed once:
// a search places hundreds of shapes on one cluster of thousands of
// devices, and each derivation sorts them by name.
struct ClusterOrder {
  std::vector<int> classes;    // DeviceClasses
  std::vector<int> canonical;  // CanonicalDeviceOrder
  std::vector<int> host_rank;  // each device's host's place, by capability
  static ClusterOrder Of(const Cluster& cluster);
};

// A key that equal for placements no cost can tell apart: the class grid
// with replicas sorted.
std::string PlacementKey(const std::vector<int>& classes, const Placement& placement);

// Every distinct placement of replicas x ranks slots, up to interchangeable
// devices and the order of replicas, in a deterministic order; nullopt when
// there are more than `limit`. REQUIRES: ranks * replicas <= devices.
std::optional<std::vector<Placement>> AllPlacements(const Cluster& cluster, int ranks, int replicas,
                                                    int64_t limit);
std::optional<std::vector<Placement>> AllPlacements(const ClusterOrder& order, int ranks,
                                                    int replicas, int64_t limit);

// Structured placements for clusters too large to enumerate: pipelines
// packed within hosts, rank groups packed within hosts, and replicas dealt
// devices by speed so they are balanced. Distinct, at least one.
std::vector<Placement> LayoutPlacements(const Cluster& cluster, int ranks, int replicas);
std::vector<Placement> LayoutPlacements(const Cluster& cluster, const ClusterOrder& order,
                                        int ranks, int replicas);

// One move of a placement: the devices of `slot` and `other_slot`
// exchanged, or (other_slot < 0) `slot` given the unused `device`.
struct PlacementMove {
  int slot = 0;
  int other_slot = -1;
  int device = -1;
};

// The distinct moves of `placement` (each to a placement no other move, nor
// `placement` itself, reaches up to interchangeable devices): two slots
// whose devices differ in class exchanged, or a slot moved to an unused
// device of another class; no placement is built. When there are more than
// `limit` moves (before removing duplicates), only every ceil(moves /
// limit)-th in that order is considered: thousands of slots have millions
// of moves, and a search samples a few dozen of them anyway.
std::vector<PlacementMove> DistinctMoves(const Cluster& cluster, const Placement& placement,
                                         int64_t limit = std::numeric_limits<int64_t>::max());
std::vector<PlacementMove> DistinctMoves(const ClusterOrder& order, const Placement& placement,
                                         int64_t limit);

// `placement` after `move`.
Placement ApplyMove(const Placement& placement, const PlacementMove& move);

// The placements of DistinctMoves, in its order.
std::vector<Placement> SwapNeighbours(const Cluster& cluster, const Placement& placement);

// The pipeline a split shared by every replica is planned for: device r is
// rank r's worst replica device (least flops, least memory) and the link
// r -> r' the slowest (bandwidth) and longest (latency) of any replica's.
// With one replica it is that replica's pipeline exactly. `host_of`
// (ClusterOrder::host_rank, optional) finds host patterns without
// comparing host names.
Cluster WorstReplicaCluster(const Cluster& cluster, const Placement& placement,
                            std::span<const int> host_of = {});

// For each of `devices`, the first index in it with the same host. Where no
// Link overrides any of them (Cluster::has_own_links), a link is the host's
// or the network's, so two lists of like devices with one pattern have the
// same links between the same positions.
std::vector<int> HostPattern(const Cluster& cluster, std::span<const int> devices);
// The same from each device's host index (ClusterOrder::host_rank).
std::vector<int> HostPattern(std::span<const int> host_of, std::span<const int> devices);

// Seconds of a ring all-reduce of `bytes` over `group`: the ring visits the
// devices host by host (canonical order), and each of its 2 (d - 1) steps
// moves bytes / d over every link at once, paced by the slowest link plus its
// latency. 0 for a group of one.
double RingAllReduceSeconds(const Cluster& cluster, std::span<const int> group, double bytes);

// Each device's place in the ring order above (host by host, then device,
// in natural order), for AllReduceRing.
std::vector<int> RingPositions(const Cluster& cluster);

// RingAllReduceSeconds of one group for several sizes: the ring is ordered
// and its links looked up once. With `ring_position` (RingPositions of the
// cluster) the ring is ordered without comparing names.
class AllReduceRing {
 public:
  AllReduceRing(const Cluster& cluster, std::span<const int> group,
                std::span<const int> ring_position = {});
  double Seconds(double bytes) const;
  // Every link at `bytes_per_second` (a measured ring's), latencies kept.
  void SetBandwidth(double bytes_per_second);

 private:
  int size_ = 0;
  std::vector<std::pair<double, double>> links_;  // distinct (bandwidth, latency)
};

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PLACEMENT_H_
