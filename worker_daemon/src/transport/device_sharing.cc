#include "pipeplan/worker/transport/device_sharing.h"

#include <map>

namespace pipeplan::worker {

std::optional<std::pair<int, int>> FirstSharedDevice(const std::vector<std::string>& uuids) {
  std::map<std::string, int> first_rank;
  std::optional<std::pair<int, int>> best;
  for (int r = 0; r < static_cast<int>(uuids.size()); ++r) {
    if (uuids[r].empty()) continue;
    auto [it, inserted] = first_rank.emplace(uuids[r], r);
    // Ranks are visited in order, so the first duplicate found has the
    // lowest second rank; keep it.
    if (!inserted && !best) best = std::make_pair(it->second, r);
  }
  return best;
}

std::string TransportForDevices(const std::string& requested,
                                const std::vector<std::string>& uuids) {
  if (requested != "nccl") return requested;
  for (const std::string& uuid : uuids) {
    if (uuid.empty()) return "gloo";
  }
  return FirstSharedDevice(uuids) ? "gloo" : "nccl";
}

}  // namespace pipeplan::worker
