#include "diagnose.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "search_space.h"

namespace pipeplan::search {
namespace {

constexpr int kDeviceTries = 12;

int SplitNodes(const SearchContext& ctx) {
  return (ctx.groups != nullptr ? ctx.groups->graph.get() : ctx.graph)->num_nodes();
}

// The least hungry candidate of `ranks` under `options` fits on `cluster`.
bool Fits(const SearchContext& ctx, const Cluster& cluster, const PlanOptions& options, int ranks) {
  SearchContext c = ctx;
  c.cluster = &cluster;
  c.options = &options;
  c.device_class = DeviceClasses(cluster);
  c.order = ClusterOrder::Of(cluster);
  c.ring_position = RingPositions(cluster);
  c.split_cache = nullptr;  // another cluster or options: solved afresh
  const int replicas = options.num_replicas > 0 ? options.num_replicas : 1;
  if (ranks * replicas > cluster.num_devices()) return false;
  const schedule::ScheduleKind kind = KindsToTry(options).front();
  const int chunks = ChunksPerRank(kind, options);
  if (int64_t{ranks} * chunks > SplitNodes(c)) return false;
  const int m = MicrobatchesToTry(options, ranks, replicas).back();
  const Candidate cand{kind, ranks, replicas, chunks, m};
  const Placement placement = LayoutPlacements(cluster, ranks, replicas).front();
  return EvaluateCandidate(c, cand, placement, PartitionMethod::kDp).ok();
}

int DeepestRanks(const SearchContext& ctx, int devices) {
  const PlanOptions& o = *ctx.options;
  if (o.num_ranks > 0) return o.num_ranks;
  const int replicas = o.num_replicas > 0 ? o.num_replicas : 1;
  return std::max(1, std::min(devices / replicas, SplitNodes(ctx)));
}

// `count` copies of the device with the most memory, as many per host as
// the cluster's fullest host has.
std::optional<Cluster> MoreDevices(const Cluster& cluster, int count, int* model) {
  std::map<std::string, int> per_host;
  int per = 1;
  *model = 0;
  for (int d = 0; d < cluster.num_devices(); ++d) {
    per = std::max(per, ++per_host[cluster.device(d).host]);
    if (cluster.device(d).memory_bytes > cluster.device(*model).memory_bytes) *model = d;
  }
  ClusterSpec spec;
  for (int i = 0; i < count; ++i) {
    DeviceSpec d = cluster.device(*model);
    d.id = absl::StrCat("d", i);
    d.host = absl::StrCat("h", i / per);
    spec.devices.push_back(std::move(d));
  }
  absl::StatusOr<Cluster> built = Cluster::Build(std::move(spec));
  if (!built.ok()) return std::nullopt;
  return *std::move(built);
}

// More devices of the largest kind, as one pipeline as deep as needed.
std::optional<std::string> DevicesChange(const SearchContext& ctx, double scale) {
  const PlanOptions& o = *ctx.options;
  const int devices = ctx.cluster->num_devices();
  const int replicas = o.num_replicas > 0 ? o.num_replicas : 1;
  const int ranks = DeepestRanks(ctx, devices);
  if (o.num_ranks > 0 && ranks * replicas <= devices) return std::nullopt;  // depth is fixed
  const int cap = o.num_ranks > 0 ? o.num_ranks : SplitNodes(ctx);
  int next = std::max(ranks + 1, static_cast<int>(std::ceil(ranks * std::min(scale, 1e6))));
  for (int i = 0; i < kDeviceTries && ranks < cap; ++i) {
    const int depth = std::min(next, cap);
    int model = 0;
    std::optional<Cluster> bigger = MoreDevices(*ctx.cluster, depth * replicas, &model);
    if (bigger && Fits(ctx, *bigger, o, depth)) {
      const DeviceSpec& d = ctx.cluster->device(model);
      return absl::StrFormat("use %d devices like %s (%.0f GiB) as %d pipeline ranks",
                             depth * replicas, d.id, d.memory_bytes / (1 << 30), depth);
    }
    if (depth == cap) break;
    next = std::max(depth + 1, static_cast<int>(std::ceil(depth * 1.25)));
  }
  return std::nullopt;
}

// A deeper pipeline on the devices there are, when the request fixed the
// depth: depths grow by a quarter until one fits, then the least that fits
// between the last that did not and it is found by halving (each answer
// planned, so the depth named fits).
std::optional<std::string> RanksChange(const SearchContext& ctx) {
  const PlanOptions& o = *ctx.options;
  if (o.num_ranks <= 0) return std::nullopt;
  const int replicas = o.num_replicas > 0 ? o.num_replicas : 1;
  const int deepest = std::min(ctx.cluster->num_devices() / replicas, SplitNodes(ctx));
  PlanOptions changed = o;
  auto fits = [&](int ranks) {
    changed.num_ranks = ranks;
    return Fits(ctx, *ctx.cluster, changed, ranks);
  };
  int no = o.num_ranks, yes = 0;
  for (int i = 0; i < kDeviceTries && no < deepest && yes == 0; ++i) {
    const int next = std::min(deepest, std::max(no + 1, static_cast<int>(std::ceil(no * 1.25))));
    (fits(next) ? yes : no) = next;
  }
  if (yes == 0) return std::nullopt;
  while (yes - no > 1) {
    const int mid = no + (yes - no) / 2;
    (fits(mid) ? yes : no) = mid;
  }
  return absl::StrFormat("--ranks %d (%d of the %d devices)", yes, yes * replicas,
                         ctx.cluster->num_devices());
}

// More (smaller) microbatches when the request fixed their count.
std::optional<std::string> MicrobatchChange(const SearchContext& ctx) {
  const PlanOptions& o = *ctx.options;
  if (o.microbatches <= 0 || o.global_batch <= 0) return std::nullopt;
  const int replicas = o.num_replicas > 0 ? o.num_replicas : 1;
  PlanOptions changed = o;
  changed.microbatches = 0;
  for (int m : MicrobatchesToTry(changed, 1, replicas)) {
    if (m <= o.microbatches || m % o.microbatches != 0) continue;
    changed.microbatches = m;
    if (Fits(ctx, *ctx.cluster, changed, DeepestRanks(ctx, ctx.cluster->num_devices()))) {
      return absl::StrFormat("--microbatches %d (microbatches of %d samples)", m,
                             o.global_batch / replicas / m);
    }
  }
  return std::nullopt;
}

// One option changed on the same cluster.
std::optional<std::string> OptionChange(const SearchContext& ctx, const PlanOptions& changed,
                                        const GroupedGraph* groups, std::string flag) {
  SearchContext c = ctx;
  c.groups = groups;
  if (!Fits(c, *ctx.cluster, changed, DeepestRanks(c, ctx.cluster->num_devices()))) {
    return std::nullopt;
  }
  return flag;
}

}  // namespace

std::string SuggestChanges(const SearchContext& ctx, double scale) {
  const PlanOptions& o = *ctx.options;
  std::vector<std::string> out;
  if (auto s = DevicesChange(ctx, scale)) out.push_back(*s);
  if (auto s = RanksChange(ctx)) out.push_back(*s);
  if (auto s = MicrobatchChange(ctx)) out.push_back(*s);
  if (ctx.groups != nullptr) {
    if (auto s = OptionChange(ctx, o, nullptr, "--cut-granularity node")) out.push_back(*s);
  }
  if (o.optimizer_state_multiplier <= 0) {
    for (Optimizer lighter : {Optimizer::kMomentum, Optimizer::kSgd}) {
      if (lighter >= o.optimizer) continue;  // not lighter than what is set
      PlanOptions changed = o;
      changed.optimizer = lighter;
      const std::string flag = absl::StrCat("--optimizer ", std::string(OptimizerName(lighter)));
      if (auto s = OptionChange(ctx, changed, ctx.groups, flag)) {
        out.push_back(*s);
        break;
      }
    }
  }
  if (o.precision == Precision::kFp32) {
    PlanOptions changed = o;
    changed.precision = Precision::kBf16Mixed;
    if (auto s = OptionChange(ctx, changed, ctx.groups, "--precision bf16-mixed")) {
      out.push_back(*s);
    }
  }
  return absl::StrJoin(out, "; or ");
}

}  // namespace pipeplan::search
