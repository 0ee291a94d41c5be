#include "contingency_plans.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace pipeplan::server {

std::vector<std::vector<std::string>> ContingencyLossSets(
    const DecodedPlan& plan, const v1::ClusterTopology& cluster,
    const std::vector<std::string>& already_lost, int max_plans) {
  std::vector<std::string> ranked;
  for (const std::vector<std::string>& replica : plan.replica_devices) {
    for (const std::string& d : replica) {
      if (std::find(ranked.begin(), ranked.end(), d) == ranked.end()) ranked.push_back(d);
    }
  }
  std::map<std::string, std::vector<std::string>> by_host;
  for (const v1::Device& d : cluster.devices()) {
    if (std::find(ranked.begin(), ranked.end(), d.id()) != ranked.end()) {
      by_host[d.host()].push_back(d.id());
    }
  }
  std::vector<std::vector<std::string>> losses;
  for (const std::string& d : ranked) losses.push_back({d});
  for (const auto& [host, devices] : by_host) {
    if (devices.size() > 1) losses.push_back(devices);
  }
  std::set<std::string> cluster_devices;
  for (const v1::Device& d : cluster.devices()) cluster_devices.insert(d.id());
  std::vector<std::vector<std::string>> out;
  for (std::vector<std::string>& loss : losses) {
    if (static_cast<int>(out.size()) >= max_plans) break;
    std::set<std::string> set(loss.begin(), loss.end());
    set.insert(already_lost.begin(), already_lost.end());
    std::vector<std::string> sorted(set.begin(), set.end());
    const bool leaves_one = std::any_of(cluster_devices.begin(), cluster_devices.end(),
                                        [&](const std::string& d) { return !set.contains(d); });
    if (!leaves_one || std::find(out.begin(), out.end(), sorted) != out.end()) continue;
    out.push_back(std::move(sorted));
  }
  return out;
}

const v1::ContingencyPlan* FindContingency(const v1::VersionedPlan& vp,
                                           const std::vector<std::string>& lost) {
  for (const v1::ContingencyPlan& c : vp.contingencies()) {
    if (std::equal(c.lost_devices().begin(), c.lost_devices().end(), lost.begin(), lost.end())) {
      return &c;
    }
  }
  return nullptr;
}

bool ContingencyStillFits(double contingency_step, double fresh_step, double slack) {
  if (!std::isfinite(contingency_step)) return false;
  if (!std::isfinite(fresh_step)) return true;  // nothing better was found
  return contingency_step <= fresh_step * (1 + slack);
}

}  // namespace pipeplan::server
