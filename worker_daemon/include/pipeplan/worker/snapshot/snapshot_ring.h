// The order of the snapshot ring (docs/snapshots.md, "The ring"): which
// rank holds which rank's in-memory snapshot. A pure function of the hosts
// of a version's world ranks, so every rank computes the same ring without
// talking to the others.
#ifndef PIPEPLAN_WORKER_SNAPSHOT_RING_H_
#define PIPEPLAN_WORKER_SNAPSHOT_RING_H_

#include <span>
#include <string>
#include <vector>

namespace pipeplan::worker {

// World ranks 0..n-1 in ring order (n = hosts.size(); hosts[r] is world
// rank r's host): ring[i] sends its snapshot to ring[(i + 1) % n], which
// holds it. Neighbours sit on different hosts whenever that is possible,
// i.e. when no host has more than n / 2 of the ranks; otherwise the ring has
// the fewest same-host neighbours a ring can have (2m - n for a host with
// m > n / 2 ranks), and those ranks' snapshots die with their host. Ranks
// are grouped by host, largest group first (ties: host name), each group in
// rank order, and the groups fill the even ring positions and then the odd
// ones. An empty host name is a host like any other. With one host (or no
// hosts) the result is the identity, the ring before hosts were known.
std::vector<int> SnapshotRing(std::span<const std::string> hosts);

// The rank `rank` sends its snapshot to (its holder) and the one it holds.
// REQUIRES: `ring` is a permutation of 0..n-1 holding `rank`.
int RingNext(std::span<const int> ring, int rank);
int RingPrev(std::span<const int> ring, int rank);

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SNAPSHOT_RING_H_
