#include "pipeplan/worker/snapshot/snapshot_ring.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace pipeplan::worker {
namespace {

int PositionOf(std::span<const int> ring, int rank) {
  return static_cast<int>(std::find(ring.begin(), ring.end(), rank) - ring.begin());
}

}  // namespace

std::vector<int> SnapshotRing(std::span<const std::string> hosts) {
  const int n = static_cast<int>(hosts.size());
  std::map<std::string, std::vector<int>> by_host;  // ranks ascending per host
  for (int r = 0; r < n; ++r) by_host[hosts[r]].push_back(r);
  std::vector<int> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  if (by_host.size() < 2) return identity;
  std::vector<const std::vector<int>*> groups;
  for (const auto& [host, ranks] : by_host) groups.push_back(&ranks);
  // Largest first; the map's order (host name) breaks ties, so every rank
  // gets the same ring.
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto* a, const auto* b) { return a->size() > b->size(); });
  std::vector<int> ring(n);
  int position = 0;
  for (const std::vector<int>* group : groups) {
    for (int r : *group) {
      ring[position] = r;
      position += 2;
      if (position >= n) position = 1;  // the even positions are full
    }
  }
  return ring;
}

int RingNext(std::span<const int> ring, int rank) {
  const int n = static_cast<int>(ring.size());
  return ring[(PositionOf(ring, rank) + 1) % n];
}

int RingPrev(std::span<const int> ring, int rank) {
  const int n = static_cast<int>(ring.size());
  return ring[(PositionOf(ring, rank) + n - 1) % n];
}

}  // namespace pipeplan::worker
