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

// A key that equal for placements no cost can tell apart: the class grid
// with replicas sorted.
std::string PlacementKey(const std::vector<int>& classes, const Placement& placement);

// Every distinct placement of replicas x ranks slots, up to interchangeable
// devices and the order of replicas, in a deterministic order; nullopt when
// there are more than `limit`. REQUIRES: ranks * replicas <= devices.
std::optional<std::vector<Placement>> AllPlacements(const Cluster& cluster, int ranks, int replicas,
                                                    int64_t limit);

// Structured placements for clusters too large to enumerate: pipelines
// packed within hosts, rank groups packed within hosts, and replicas dealt
// devices by speed so they are balanced. Distinct, at least one.
std::vector<Placement> LayoutPlacements(const Cluster& cluster, int ranks, int replicas);

// Distinct placements one move from `placement`: two slots whose devices
// differ in class exchanged, or a slot moved to an unused device of another
// class.
std::vector<Placement> SwapNeighbours(const Cluster& cluster, const Placement& placement);

// The pipeline a split shared by every replica is planned for: device r is
// rank r's worst replica device (least flops, least memory) and the link
// r -> r' the slowest (bandwidth) and longest (latency) of any replica's.
// With one replica it is that replica's pipeline exactly.
Cluster WorstReplicaCluster(const Cluster& cluster, const Placement& placement);

// Seconds of a ring all-reduce of `bytes` over `group`: the ring visits the
// devices host by host (canonical order), and each of its 2 (d - 1) steps
// moves bytes / d over every link at once, paced by the slowest link plus its
// latency. 0 for a group of one.
double RingAllReduceSeconds(const Cluster& cluster, std::span<const int> group, double bytes);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_PLACEMENT_H_
