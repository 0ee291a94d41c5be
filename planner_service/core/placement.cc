#include "pipeplan/core/placement.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pipeplan {
namespace {

// "gpu2" < "gpu10": digit runs compare as numbers, everything else bytewise.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      const std::string_view na = std::string_view(a).substr(i, ei - i);
      const std::string_view nb = std::string_view(b).substr(j, ej - j);
      const size_t za = na.find_first_not_of('0'), zb = nb.find_first_not_of('0');
      const std::string_view ta = za == std::string_view::npos ? "" : na.substr(za);
      const std::string_view tb = zb == std::string_view::npos ? "" : nb.substr(zb);
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      if (ta != tb) return ta < tb;
      if (na.size() != nb.size()) return na.size() < nb.size();
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

// The ring's order: host by host, then device, in natural order.
bool RingLess(const Cluster& cluster, int a, int b) {
  const DeviceSpec& x = cluster.device(a);
  const DeviceSpec& y = cluster.device(b);
  if (x.host != y.host) return NaturalLess(x.host, y.host);
  return NaturalLess(x.id, y.id);
}

// Hosts by capability (total flops, then devices), then name.
std::vector<std::string> HostsByCapability(const Cluster& cluster) {
  std::map<std::string, std::pair<double, int>> hosts;
  for (int d = 0; d < cluster.num_devices(); ++d) {
    auto& [flops, count] = hosts[cluster.device(d).host];
    flops += cluster.device(d).flops;
    ++count;
  }
  std::vector<std::string> names;
  for (const auto& [name, stats] : hosts) names.push_back(name);
  std::stable_sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return std::tie(hosts[b].first, hosts[b].second) < std::tie(hosts[a].first, hosts[a].second);
  });
  return names;
}

// Each device's host's place in `hosts`, looked up once: layouts sort
// thousands of devices by it.
std::vector<int> HostIndexOfDevices(const Cluster& cluster, const std::vector<std::string>& hosts) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < hosts.size(); ++i) index.emplace(hosts[i], static_cast<int>(i));
  std::vector<int> out(cluster.num_devices());
  for (int d = 0; d < cluster.num_devices(); ++d) out[d] = index.at(cluster.device(d).host);
  return out;
}

// Devices of `order` assigned to slots by `slot_of`: devices[slot_of(i)] =
// order[i] for the first ranks * replicas entries.
template <typename SlotOf>
Placement Fill(const std::vector<int>& order, int ranks, int replicas, SlotOf slot_of) {
  Placement p{.ranks = ranks, .replicas = replicas};
  p.devices.assign(static_cast<size_t>(ranks) * replicas, -1);
  for (int i = 0; i < ranks * replicas; ++i) p.devices[slot_of(i)] = order[i];
  return p;
}

void AddDistinct(const std::vector<int>& classes, Placement p, std::set<std::string>& seen,
                 std::vector<Placement>& out) {
  if (seen.insert(PlacementKey(classes, p)).second) out.push_back(std::move(p));
}

// Depth-first enumeration of class grids: replicas in non-decreasing
// lexicographic order, each class used at most as often as it has devices.
class GridEnumerator {
 public:
  GridEnumerator(int ranks, int replicas, std::vector<int> left, int64_t limit)
      : p_(ranks), d_(replicas), left_(std::move(left)), limit_(limit) {
    grid_.assign(static_cast<size_t>(p_) * d_, 0);
  }

  // False when there are more grids than the limit, or when finding them
  // takes more than kVisitsPerGrid steps per grid allowed: with every
  // device of a large cluster in use, the symmetry-broken search can spend
  // seconds in dead ends before its limit's worth of grids; the caller then
  // falls back to layouts, as for a count over the limit.
  bool Run() {
    Rec(0, 0, false);
    return !overflow_;
  }
  const std::vector<std::vector<int>>& grids() const { return grids_; }

 private:
  static constexpr int64_t kVisitsPerGrid = 1000;

  void Rec(int q, int i, bool tight) {
    if (overflow_) return;
    if (++visits_ > (limit_ + 1) * kVisitsPerGrid) {
      overflow_ = true;
      return;
    }
    if (q == d_) {
      grids_.push_back(grid_);
      if (static_cast<int64_t>(grids_.size()) > limit_) overflow_ = true;
      return;
    }
    if (i == p_) return Rec(q + 1, 0, q + 1 < d_);
    const int lo = tight ? grid_[(q - 1) * p_ + i] : 0;
    for (int c = lo; c < static_cast<int>(left_.size()) && !overflow_; ++c) {
      if (left_[c] == 0) continue;
      --left_[c];
      grid_[q * p_ + i] = c;
      Rec(q, i + 1, tight && c == lo);
      ++left_[c];
    }
  }

  const int p_, d_;
  std::vector<int> left_;
  const int64_t limit_;
  std::vector<int> grid_;
  std::vector<std::vector<int>> grids_;
  int64_t visits_ = 0;
  bool overflow_ = false;
};

// PlacementKey's equality (the multiset of the replicas' class rows) for
// the placements one move from a base, without building them or strings:
// each distinct row gets an id, and since a move changes one or two rows,
// the placement after it is the base less those rows' ids plus the new
// rows' ids. Two moves reach the same placement exactly when these
// differences (common ids cancelled) are equal, so the difference is the
// key: a few ints, built in O(ranks).
class MoveKeys {
 public:
  MoveKeys(const std::vector<int>& classes, const Placement& base)
      : classes_(classes), base_(base) {
    for (int q = 0; q < base.replicas; ++q) base_ids_.push_back(Id(Row(q, kNone)));
  }

  // A move that changes nothing: its key is the base's.
  static constexpr PlacementMove kNone = {.slot = 0, .other_slot = 0};

  // The removed and the added row ids, common ones cancelled, each pair
  // sorted and padded with -1.
  using Key = std::array<int, 4>;

  Key Of(const PlacementMove& m) {
    const int p = base_.ranks;
    const int q1 = m.slot / p;
    const int q2 = m.other_slot >= 0 ? m.other_slot / p : q1;
    std::array<int, 2> removed = {base_ids_[q1], -1}, added = {Id(Row(q1, m)), -1};
    if (q2 != q1) {
      removed[1] = base_ids_[q2];
      added[1] = Id(Row(q2, m));
    }
    for (int& r : removed) {
      for (int& a : added) {
        if (r >= 0 && r == a) r = a = -1;
      }
    }
    std::sort(removed.begin(), removed.end());
    std::sort(added.begin(), added.end());
    return {removed[0], removed[1], added[0], added[1]};
  }

 private:
  // Row q's classes after `m`.
  std::vector<int> Row(int q, const PlacementMove& m) const {
    std::vector<int> row(base_.ranks);
    for (int r = 0; r < base_.ranks; ++r) {
      const int slot = q * base_.ranks + r;
      int device = base_.devices[slot];
      if (m.other_slot >= 0 && m.slot != m.other_slot) {
        if (slot == m.slot) device = base_.devices[m.other_slot];
        if (slot == m.other_slot) device = base_.devices[m.slot];
      } else if (m.other_slot < 0 && slot == m.slot) {
        device = m.device;
      }
      row[r] = classes_[device];
    }
    return row;
  }

  int Id(std::vector<int> row) {
    return ids_.emplace(std::move(row), static_cast<int>(ids_.size())).first->second;
  }

  const std::vector<int>& classes_;
  const Placement& base_;
  std::vector<int> base_ids_;
  absl::flat_hash_map<std::vector<int>, int> ids_;
};

}  // namespace

std::vector<int> Placement::Group(int rank) const {
  std::vector<int> out;
  for (int q = 0; q < replicas; ++q) out.push_back(device(q, rank));
  return out;
}

std::vector<int> Placement::Pipeline(int replica) const {
  return {devices.begin() + replica * ranks, devices.begin() + (replica + 1) * ranks};
}

std::vector<int> CanonicalDeviceOrder(const Cluster& cluster) {
  std::vector<int> order(cluster.num_devices());
  for (int d = 0; d < cluster.num_devices(); ++d) order[d] = d;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const DeviceSpec& x = cluster.device(a);
    const DeviceSpec& y = cluster.device(b);
    if (x.host != y.host) return NaturalLess(x.host, y.host);
    if (x.flops != y.flops) return x.flops > y.flops;
    if (x.memory_bytes != y.memory_bytes) return x.memory_bytes > y.memory_bytes;
    return NaturalLess(x.id, y.id);
  });
  return order;
}

std::vector<int> DeviceClasses(const Cluster& cluster) {
  std::vector<int> classes(cluster.num_devices(), -1);
  std::map<std::tuple<std::string, double, double>, int> by_key;
  int next = 0;
  for (int d : CanonicalDeviceOrder(cluster)) {
    const DeviceSpec& dev = cluster.device(d);
    if (cluster.has_own_links(d)) {
      classes[d] = next++;
      continue;
    }
    auto [it, inserted] = by_key.emplace(std::tuple(dev.host, dev.flops, dev.memory_bytes), next);
    if (inserted) ++next;
    classes[d] = it->second;
  }
  return classes;
}

std::string PlacementKey(const std::vector<int>& classes, const Placement& placement) {
  std::vector<std::string> rows;
  for (int q = 0; q < placement.replicas; ++q) {
    std::vector<int> row;
    for (int r = 0; r < placement.ranks; ++r) row.push_back(classes[placement.device(q, r)]);
    rows.push_back(absl::StrJoin(row, ","));
  }
  std::sort(rows.begin(), rows.end());
  return absl::StrJoin(rows, ";");
}

ClusterOrder ClusterOrder::Of(const Cluster& cluster) {
  ClusterOrder out{.classes = DeviceClasses(cluster), .canonical = CanonicalDeviceOrder(cluster)};
  out.host_rank = HostIndexOfDevices(cluster, HostsByCapability(cluster));
  return out;
}

std::optional<std::vector<Placement>> AllPlacements(const Cluster& cluster, int ranks, int replicas,
                                                    int64_t limit) {
  return AllPlacements(ClusterOrder::Of(cluster), ranks, replicas, limit);
}

std::optional<std::vector<Placement>> AllPlacements(const ClusterOrder& order, int ranks,
                                                    int replicas, int64_t limit) {
  const std::vector<int>& classes = order.classes;
  const int num_classes = *std::max_element(classes.begin(), classes.end()) + 1;
  std::vector<std::vector<int>> members(num_classes);
  for (int d : order.canonical) members[classes[d]].push_back(d);
  std::vector<int> left(num_classes);
  for (int c = 0; c < num_classes; ++c) left[c] = static_cast<int>(members[c].size());
  GridEnumerator grids(ranks, replicas, left, limit);
  if (!grids.Run()) return std::nullopt;
  std::vector<Placement> out;
  out.reserve(grids.grids().size());
  for (const std::vector<int>& grid : grids.grids()) {
    Placement p{.ranks = ranks, .replicas = replicas};
    std::vector<int> used(num_classes, 0);
    for (int c : grid) p.devices.push_back(members[c][used[c]++]);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Placement> LayoutPlacements(const Cluster& cluster, int ranks, int replicas) {
  return LayoutPlacements(cluster, ClusterOrder::Of(cluster), ranks, replicas);
}

std::vector<Placement> LayoutPlacements(const Cluster& cluster, const ClusterOrder& order,
                                        int ranks, int replicas) {
  const std::vector<int>& classes = order.classes;
  const std::vector<int>& host_of = order.host_rank;
  const std::vector<int>& canonical = order.canonical;
  std::vector<int> packed = canonical;
  std::stable_sort(packed.begin(), packed.end(),
                   [&](int a, int b) { return host_of[a] < host_of[b]; });
  std::vector<Placement> out;
  std::set<std::string> seen;
  // Pipelines within hosts; then rank groups within hosts.
  AddDistinct(classes, Fill(packed, ranks, replicas, [](int i) { return i; }), seen, out);
  AddDistinct(
      classes,
      Fill(packed, ranks, replicas, [&](int i) { return (i % replicas) * ranks + i / replicas; }),
      seen, out);
  // Fastest devices dealt to replicas in snake order so each replica gets a
  // like share of speed; within a replica host-mates stay adjacent and the
  // larger memories take the first ranks (they hold the most in flight).
  std::vector<int> fastest = canonical;
  std::stable_sort(fastest.begin(), fastest.end(), [&](int a, int b) {
    return std::tie(cluster.device(b).flops, cluster.device(b).memory_bytes) <
           std::tie(cluster.device(a).flops, cluster.device(a).memory_bytes);
  });
  std::vector<std::vector<int>> dealt(replicas);
  for (int i = 0; i < ranks * replicas; ++i) {
    const int round = i / replicas, pos = i % replicas;
    dealt[round % 2 == 0 ? pos : replicas - 1 - pos].push_back(fastest[i]);
  }
  Placement balanced{.ranks = ranks, .replicas = replicas};
  for (std::vector<int>& pipeline : dealt) {
    std::stable_sort(pipeline.begin(), pipeline.end(), [&](int a, int b) {
      const int ha = host_of[a];
      const int hb = host_of[b];
      return std::tie(ha, cluster.device(b).memory_bytes) <
             std::tie(hb, cluster.device(a).memory_bytes);
    });
    balanced.devices.insert(balanced.devices.end(), pipeline.begin(), pipeline.end());
  }
  AddDistinct(classes, std::move(balanced), seen, out);
  return out;
}

std::vector<PlacementMove> DistinctMoves(const Cluster& cluster, const Placement& placement,
                                         int64_t limit) {
  return DistinctMoves(ClusterOrder::Of(cluster), placement, limit);
}

std::vector<PlacementMove> DistinctMoves(const ClusterOrder& order, const Placement& placement,
                                         int64_t limit) {
  const std::vector<int>& classes = order.classes;
  const int slots = static_cast<int>(placement.devices.size());
  std::vector<char> used(classes.size(), 0);
  for (int d : placement.devices) used[d] = 1;
  std::map<int, int> unused_of_class;  // class -> first unused device, canonically
  for (int d : order.canonical) {
    if (!used[d]) unused_of_class.emplace(classes[d], d);
  }
  auto differ = [&](int i, int c) { return classes[placement.devices[i]] != c; };
  int64_t moves = 0;
  for (int i = 0; i < slots; ++i) {
    for (int j = i + 1; j < slots; ++j) moves += differ(j, classes[placement.devices[i]]);
    for (const auto& [c, d] : unused_of_class) moves += differ(i, c);
  }
  const int64_t every = moves > limit ? (moves - 1) / std::max<int64_t>(1, limit) + 1 : 1;
  MoveKeys keys(classes, placement);
  absl::flat_hash_set<MoveKeys::Key> seen = {keys.Of(MoveKeys::kNone)};
  std::vector<PlacementMove> out;
  int64_t index = 0;
  auto add = [&](const PlacementMove& m) {
    if (index++ % every != 0) return;
    if (seen.insert(keys.Of(m)).second) out.push_back(m);
  };
  for (int i = 0; i < slots; ++i) {
    for (int j = i + 1; j < slots; ++j) {
      if (differ(j, classes[placement.devices[i]])) add({.slot = i, .other_slot = j});
    }
  }
  for (int i = 0; i < slots; ++i) {
    for (const auto& [c, d] : unused_of_class) {
      if (differ(i, c)) add({.slot = i, .device = d});
    }
  }
  return out;
}

Placement ApplyMove(const Placement& placement, const PlacementMove& move) {
  Placement next = placement;
  if (move.other_slot >= 0) {
    std::swap(next.devices[move.slot], next.devices[move.other_slot]);
  } else {
    next.devices[move.slot] = move.device;
  }
  return next;
}

std::vector<Placement> SwapNeighbours(const Cluster& cluster, const Placement& placement) {
  std::vector<Placement> out;
  for (const PlacementMove& m : DistinctMoves(cluster, placement)) {
    out.push_back(ApplyMove(placement, m));
  }
  return out;
}

std::vector<int> HostPattern(const Cluster& cluster, std::span<const int> devices) {
  // Hosts by name, not by comparing each device with every earlier one: a
  // deep pipeline's pattern is asked for on every replica of every plan.
  absl::flat_hash_map<std::string_view, int> first;  // host -> first index
  first.reserve(devices.size());
  std::vector<int> out(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    out[i] = first.try_emplace(cluster.device(devices[i]).host, static_cast<int>(i)).first->second;
  }
  return out;
}

std::vector<int> HostPattern(std::span<const int> host_of, std::span<const int> devices) {
  std::vector<std::pair<int, int>> seen;  // (host, first index): a pipeline spans few hosts
  std::vector<int> out(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    const int host = host_of[devices[i]];
    auto it =
        std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == host; });
    if (it == seen.end()) it = seen.insert(seen.end(), {host, static_cast<int>(i)});
    out[i] = it->second;
  }
  return out;
}

namespace {

// The replicas whose links stand for every replica's: one per host pattern
// of its pipeline when no device of the placement has links of its own
// (like patterns, like links), otherwise all of them.
std::vector<int> LinkRepresentatives(const Cluster& cluster, const Placement& placement,
                                     std::span<const int> host_of) {
  std::vector<int> out;
  const bool own = std::any_of(placement.devices.begin(), placement.devices.end(),
                               [&](int d) { return cluster.has_own_links(d); });
  std::set<std::vector<int>> patterns;
  for (int q = 0; q < placement.replicas; ++q) {
    if (own) {
      out.push_back(q);
      continue;
    }
    const std::vector<int> pipeline = placement.Pipeline(q);
    if (patterns
            .insert(host_of.empty() ? HostPattern(cluster, pipeline)
                                    : HostPattern(host_of, pipeline))
            .second) {
      out.push_back(q);
    }
  }
  return out;
}

}  // namespace

Cluster WorstReplicaCluster(const Cluster& cluster, const Placement& placement,
                            std::span<const int> host_of) {
  const int p = placement.ranks;
  std::vector<DeviceSpec> devices(p);
  std::vector<double> bandwidth(static_cast<size_t>(p) * p, 1), latency(static_cast<size_t>(p) * p);
  const std::vector<int> links = LinkRepresentatives(cluster, placement, host_of);
  for (int r = 0; r < p; ++r) {
    DeviceSpec& dev = devices[r];
    dev.id = absl::StrCat("rank", r);
    dev.host = dev.id;
    dev.flops = std::numeric_limits<double>::infinity();
    dev.memory_bytes = std::numeric_limits<double>::infinity();
    for (int q = 0; q < placement.replicas; ++q) {
      const DeviceSpec& real = cluster.device(placement.device(q, r));
      dev.flops = std::min(dev.flops, real.flops);
      dev.memory_bytes = std::min(dev.memory_bytes, real.memory_bytes);
    }
    for (int s = 0; s < p; ++s) {
      if (s == r) continue;
      double bw = std::numeric_limits<double>::infinity(), lat = 0;
      for (int q : links) {
        bw = std::min(bw, cluster.bandwidth(placement.device(q, r), placement.device(q, s)));
        lat = std::max(lat, cluster.latency(placement.device(q, r), placement.device(q, s)));
      }
      bandwidth[r * p + s] = bw;
      latency[r * p + s] = lat;
    }
  }
  return Cluster::FromResolved(std::move(devices), std::move(bandwidth), std::move(latency),
                               cluster.max_flops());
}

std::vector<int> RingPositions(const Cluster& cluster) {
  std::vector<int> order(cluster.num_devices());
  for (int d = 0; d < cluster.num_devices(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return RingLess(cluster, a, b); });
  std::vector<int> position(cluster.num_devices());
  for (int i = 0; i < cluster.num_devices(); ++i) position[order[i]] = i;
  return position;
}

AllReduceRing::AllReduceRing(const Cluster& cluster, std::span<const int> group,
                             std::span<const int> ring_position)
    : size_(static_cast<int>(group.size())) {
  std::vector<int> ring(group.begin(), group.end());
  if (ring_position.empty()) {
    std::sort(ring.begin(), ring.end(), [&](int a, int b) { return RingLess(cluster, a, b); });
  } else {
    std::sort(ring.begin(), ring.end(),
              [&](int a, int b) { return ring_position[a] < ring_position[b]; });
  }
  std::set<std::pair<double, double>> seen;
  for (int i = 0; i < size_ && size_ > 1; ++i) {
    const int a = ring[i], b = ring[(i + 1) % size_];
    if (seen.insert({cluster.bandwidth(a, b), cluster.latency(a, b)}).second) {
      links_.push_back({cluster.bandwidth(a, b), cluster.latency(a, b)});
    }
  }
}

double AllReduceRing::Seconds(double bytes) const {
  if (size_ <= 1 || bytes <= 0) return 0;
  double slowest = 0;
  for (const auto& [bw, lat] : links_) slowest = std::max(slowest, bytes / size_ / bw + lat);
  return 2.0 * (size_ - 1) * slowest;
}

void AllReduceRing::SetBandwidth(double bytes_per_second) {
  for (auto& [bw, lat] : links_) bw = bytes_per_second;
}

double RingAllReduceSeconds(const Cluster& cluster, std::span<const int> group, double bytes) {
  return AllReduceRing(cluster, group).Seconds(bytes);
}

}  // namespace pipeplan
