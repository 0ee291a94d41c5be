#include "pipeplan/core/cpu_pools.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "pipeplan/core/schedule/action.h"

namespace pipeplan {
namespace {

// A compute's wall-clock interval and the sample timing it came from.
struct Run {
  PoolInterval interval;
  size_t sample = 0, timing = 0;
};

double Share(double load, double cpus) { return load > cpus ? cpus / load : 1.0; }

bool IsCompute(const std::string& action) {
  absl::StatusOr<std::optional<schedule::Action>> a = schedule::ParseAction(action);
  return a.ok() && a->has_value() && schedule::IsCompute((*a)->type);
}

// The computes of the samples of devices in pool `p`.
std::vector<Run> PoolRuns(const std::vector<StepSample>& samples, const CpuPools& pools, int p) {
  std::vector<Run> out;
  for (size_t i = 0; i < samples.size(); ++i) {
    const StepSample& s = samples[i];
    auto it = pools.device_pool.find(s.device_id);
    if (it == pools.device_pool.end() || it->second != p || s.start_unix_us <= 0) continue;
    const double t0 = static_cast<double>(s.start_unix_us) * 1e-6;
    const double threads = pools.device_threads.at(s.device_id);
    for (size_t k = 0; k < s.timings.size(); ++k) {
      const TimingSample& t = s.timings[k];
      if (!IsCompute(t.action) || !(t.seconds > 0)) continue;
      double end = t.start_seconds + t.seconds;
      if (k + 1 < s.timings.size()) end = std::max(end, s.timings[k + 1].start_seconds);
      out.push_back({{t0 + end - t.seconds, t0 + end, threads}, i, k});
    }
  }
  return out;
}

}  // namespace

ShareIntegral::ShareIntegral(std::span<const PoolInterval> intervals, double cpus) {
  std::vector<std::pair<double, double>> steps;  // (time, load change)
  for (const PoolInterval& i : intervals) {
    steps.emplace_back(i.start, i.threads);
    steps.emplace_back(i.end, -i.threads);
  }
  std::sort(steps.begin(), steps.end());
  double load = 0, area = 0, last = steps.empty() ? 0 : steps.front().first;
  for (const auto& [t, change] : steps) {
    area += (t - last) * Share(load, cpus);
    last = t;
    load = std::max(0.0, load + change);
    times_.push_back(t);
    areas_.push_back(area);
    shares_.push_back(Share(load, cpus));
  }
}

double ShareIntegral::At(double t) const {
  auto it = std::upper_bound(times_.begin(), times_.end(), t);
  if (it == times_.begin()) return 0;
  const size_t i = static_cast<size_t>(it - times_.begin()) - 1;
  return areas_[i] + (t - times_[i]) * shares_[i];
}

CpuPools CpuPoolsOf(std::span<const StepSample> samples) {
  std::map<std::string, const StepSample*> latest;
  for (const StepSample& s : samples) {
    if (s.cpu_pool.empty() || s.cpu_pool_cpus <= 0 || s.compute_threads <= 0) continue;
    const StepSample*& l = latest[s.device_id];
    if (l == nullptr || s.step >= l->step) l = &s;
  }
  CpuPools out;
  for (const auto& [device, latest_sample] : latest) {
    const StepSample* s = latest_sample;  // clang 14 cannot capture a structured binding
    auto it = std::find_if(out.pools.begin(), out.pools.end(),
                           [&](const CpuPools::Pool& p) { return p.name == s->cpu_pool; });
    if (it == out.pools.end()) {
      out.pools.push_back({s->cpu_pool, static_cast<double>(s->cpu_pool_cpus)});
      it = out.pools.end() - 1;
    }
    out.device_pool[device] = static_cast<int>(it - out.pools.begin());
    out.device_threads[device] = s->compute_threads;
  }
  return out;
}

std::vector<StepSample> SoloComputeTimes(std::vector<StepSample> samples, const CpuPools& pools) {
  for (int p = 0; p < static_cast<int>(pools.pools.size()); ++p) {
    const std::vector<Run> runs = PoolRuns(samples, pools, p);
    std::vector<PoolInterval> intervals;
    for (const Run& r : runs) intervals.push_back(r.interval);
    const ShareIntegral share(intervals, pools.pools[p].cpus);
    for (const Run& r : runs) {
      samples[r.sample].timings[r.timing].seconds = share.SoloSeconds(r.interval);
    }
  }
  return samples;
}

schedule::ComputeSharing SharingOf(const CpuPools& pools,
                                   const std::vector<std::vector<std::string>>& rank_devices) {
  schedule::ComputeSharing out;
  bool any = false;
  for (const std::vector<std::string>& devices : rank_devices) {
    auto it = devices.empty() ? pools.device_pool.end() : pools.device_pool.find(devices.front());
    if (it == pools.device_pool.end()) {
      out.rank_pool.push_back(-1);
      out.rank_load.push_back(1);
      continue;
    }
    double load = 0;
    for (const std::string& d : devices) {
      auto other = pools.device_pool.find(d);
      if (other != pools.device_pool.end() && other->second == it->second) {
        load += pools.device_threads.at(d);
      }
    }
    out.rank_pool.push_back(it->second);
    out.rank_load.push_back(load);
    any = true;
  }
  if (!any) return {};
  for (const CpuPools::Pool& p : pools.pools) out.pool_capacity.push_back(p.cpus);
  return out;
}

}  // namespace pipeplan
