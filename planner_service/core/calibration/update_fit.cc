#include "pipeplan/core/update_fit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "pipeplan/core/cpu_pools.h"
#include "pipeplan/core/median.h"
#include "pipeplan/core/schedule/action.h"

namespace pipeplan {
namespace {

// A step is read as agreed when every rank ended at most this long before
// the last one arrived (clock skew between reports, a message's posting).
constexpr double kAgreementSlack = 1e-3;
// ... in at least this share of the steps.
constexpr double kAgreedShare = 0.8;

// One rank's EndStep in one step, on the step's clock (seconds).
struct Update {
  int rank = -1;
  double arrival = 0, end = 0;
  double bytes = 0;
  std::string pool;  // empty: CPUs of its own
  double cpus = 0, threads = 0;
};

// The parameter bytes of the stages that `r`'s computes name.
double ReportBytes(const StepSample& r, std::span<const double> stage_param_bytes) {
  std::set<int> stages;
  for (const TimingSample& t : r.timings) {
    absl::StatusOr<std::optional<schedule::Action>> a = schedule::ParseAction(t.action);
    if (a.ok() && *a && schedule::IsCompute((*a)->type)) stages.insert((*a)->stage);
  }
  double bytes = 0;
  for (int s : stages) {
    if (s >= 0 && s < static_cast<int>(stage_param_bytes.size())) bytes += stage_param_bytes[s];
  }
  return bytes;
}

// Per step with a wall-clock start on every report, its updates.
std::vector<std::vector<Update>> StepsOf(std::span<const StepSample> samples,
                                         std::span<const double> stage_param_bytes) {
  std::map<int64_t, std::vector<const StepSample*>> by_step;
  for (const StepSample& s : samples) by_step[s.step].push_back(&s);
  std::vector<std::vector<Update>> out;
  for (const auto& [step, reports] : by_step) {
    int64_t first = INT64_MAX;
    bool clocked = reports.size() >= 2;
    for (const StepSample* r : reports) {
      clocked = clocked && r->start_unix_us > 0 && r->optimizer_seconds > 0;
      first = std::min(first, r->start_unix_us);
    }
    if (!clocked) continue;
    std::vector<Update>& updates = out.emplace_back();
    for (const StepSample* r : reports) {
      const double end = static_cast<double>(r->start_unix_us - first) * 1e-6 + r->step_seconds;
      const double reduce = std::max(0.0, r->allreduce_exposed_seconds);
      updates.push_back({.rank = r->rank,
                         .arrival = end - r->optimizer_seconds + reduce,
                         .end = end,
                         .bytes = ReportBytes(*r, stage_param_bytes),
                         .pool = r->cpu_pool,
                         .cpus = static_cast<double>(r->cpu_pool_cpus),
                         .threads = static_cast<double>(std::max(1, r->compute_threads))});
    }
  }
  return out;
}

double Agreement(const std::vector<Update>& updates) {
  double last = 0;
  for (const Update& u : updates) last = std::max(last, u.arrival);
  return last;
}

// Each update's seconds alone: from the agreement to its end, weighted at
// each instant by its share of its pool (ShareIntegral over the pool's
// updates); the wall time for one on CPUs of its own.
std::vector<double> SoloUpdates(const std::vector<Update>& updates, double agreement) {
  std::map<std::string, std::vector<PoolInterval>> pools;
  std::map<std::string, double> cpus;
  for (const Update& u : updates) {
    if (!u.pool.empty() && u.cpus > 0) {
      pools[u.pool].push_back({agreement, std::max(agreement, u.end), u.threads});
      cpus[u.pool] = u.cpus;
    }
  }
  std::map<std::string, ShareIntegral> shares;
  for (const auto& [pool, intervals] : pools) {
    shares.emplace(pool, ShareIntegral(intervals, cpus[pool]));
  }
  std::vector<double> out;
  for (const Update& u : updates) {
    const PoolInterval mine{agreement, std::max(agreement, u.end), u.threads};
    auto it = u.pool.empty() || !(u.cpus > 0) ? shares.end() : shares.find(u.pool);
    out.push_back(it == shares.end() ? mine.end - mine.start : it->second.SoloSeconds(mine));
  }
  return out;
}

}  // namespace

UpdateFit FitUpdates(std::span<const StepSample> samples,
                     std::span<const double> stage_param_bytes) {
  const std::vector<std::vector<Update>> steps = StepsOf(samples, stage_param_bytes);
  std::map<int, std::vector<double>> solo;
  std::map<int, double> bytes;
  int agreed = 0;
  for (const std::vector<Update>& updates : steps) {
    const double agreement = Agreement(updates);
    bool all_after = true;
    for (const Update& u : updates) all_after = all_after && u.end >= agreement - kAgreementSlack;
    agreed += all_after ? 1 : 0;
    const std::vector<double> alone = SoloUpdates(updates, agreement);
    for (size_t i = 0; i < updates.size(); ++i) {
      solo[updates[i].rank].push_back(alone[i]);
      bytes[updates[i].rank] = updates[i].bytes;
    }
  }
  UpdateFit fit;
  if (steps.empty() || solo.size() < 2 ||
      agreed < kAgreedShare * static_cast<double>(steps.size())) {
    return fit;
  }
  std::vector<double> x, y;
  for (auto& [rank, seconds] : solo) {
    x.push_back(bytes[rank]);
    y.push_back(MedianOr(std::move(seconds), 0));
  }
  std::tie(fit.fixed_seconds, fit.seconds_per_param_byte) = RepeatedMedianLine(x, y);
  fit.fitted = true;
  return fit;
}

double UpdateTailSeconds(const UpdateFit& fit, std::span<const double> rank_param_bytes,
                         const schedule::ComputeSharing& sharing) {
  const size_t n = rank_param_bytes.size();
  std::vector<double> left(n);
  for (size_t r = 0; r < n; ++r) left[r] = fit.SoloSeconds(rank_param_bytes[r]);
  auto pool = [&](size_t r) { return r < sharing.rank_pool.size() ? sharing.rank_pool[r] : -1; };
  auto load = [&](size_t r) { return r < sharing.rank_load.size() ? sharing.rank_load[r] : 1.0; };
  // Processor sharing from the agreement on: at each instant a rank's update
  // progresses at min(1, capacity / load of the pool's updates running).
  double now = 0;
  std::vector<bool> done(n, false);
  while (std::find(done.begin(), done.end(), false) != done.end()) {
    std::map<int, double> running;
    for (size_t r = 0; r < n; ++r) {
      if (!done[r] && pool(r) >= 0) running[pool(r)] += load(r);
    }
    std::vector<double> rate(n, 1.0);
    double step = INFINITY;
    for (size_t r = 0; r < n; ++r) {
      if (done[r]) continue;
      if (pool(r) >= 0) {
        rate[r] = std::min(1.0, sharing.pool_capacity[pool(r)] / running[pool(r)]);
      }
      step = std::min(step, left[r] / rate[r]);
    }
    now += step;
    for (size_t r = 0; r < n; ++r) {
      if (done[r]) continue;
      left[r] -= step * rate[r];
      if (left[r] <= 1e-12 * std::max(1.0, now)) done[r] = true;
    }
  }
  return now;
}

}  // namespace pipeplan
