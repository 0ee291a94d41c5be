#include "pipeplan/server/replan/measured_steps.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "pipeplan/core/median.h"

namespace pipeplan::server {
namespace {

// One worker's figures over the steps it reported.
struct PerWorker {
  std::string device;
  std::vector<double> step, compute, comm, bubble;
  double peak = 0;
};

// The replica of the device that runs `rank` (0 when the plan lists none).
int ReplicaOf(const v1::Plan& plan, int rank, const std::string& device) {
  for (int q = 0; q < plan.replicas_size(); ++q) {
    const auto& ids = plan.replicas(q).rank_device_ids();
    if (rank >= 0 && rank < ids.size() && ids[rank] == device) return q;
  }
  return 0;
}

void AddRows(const std::map<std::pair<int, std::string>, PerWorker>& workers, const v1::Plan& plan,
             v1::JobObservation* out) {
  std::vector<std::pair<int, v1::RankObservation>> rows;  // (replica, row)
  for (const auto& [key, pw] : workers) {
    v1::RankObservation r;
    r.set_rank(key.first);
    r.set_worker_id(key.second);
    r.set_device_id(pw.device);
    r.set_step_seconds(MedianOr(pw.step, 0));
    r.set_compute_seconds(MedianOr(pw.compute, 0));
    r.set_comm_seconds(MedianOr(pw.comm, 0));
    r.set_bubble_ratio(MedianOr(pw.bubble, 0));
    r.set_peak_memory_bytes(pw.peak);
    rows.emplace_back(ReplicaOf(plan, key.first, pw.device), std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.second.rank(), a.first) < std::make_pair(b.second.rank(), b.first);
  });
  for (auto& [replica, r] : rows) *out->add_ranks() = std::move(r);
}

}  // namespace

void AddMeasuredSteps(const std::vector<StepSample>& samples, const v1::Plan& plan, int num_ranks,
                      v1::JobObservation* out) {
  std::map<int64_t, std::vector<const StepSample*>> by_step;
  for (const StepSample& s : samples) by_step[s.step].push_back(&s);
  std::vector<double> makespans, bubbles;
  // By (rank, worker): with replicas a rank has several workers.
  std::map<std::pair<int, std::string>, PerWorker> workers;
  for (const auto& [step, reports] : by_step) {
    std::set<int> seen;
    for (const StepSample* r : reports) seen.insert(r->rank);
    if (static_cast<int>(seen.size()) < num_ranks) continue;
    int64_t first = INT64_MAX;
    double last = 0, compute = 0, longest = 0;
    for (const StepSample* r : reports) first = std::min(first, r->start_unix_us);
    for (const StepSample* r : reports) {
      last = std::max(last, static_cast<double>(r->start_unix_us - first) * 1e-6 + r->step_seconds);
      longest = std::max(longest, r->step_seconds);
      compute += r->compute_seconds;
      PerWorker& pw = workers[{r->rank, r->worker_id}];
      pw.device = r->device_id;
      pw.step.push_back(r->step_seconds);
      pw.compute.push_back(r->compute_seconds);
      pw.comm.push_back(r->comm_seconds);
      pw.bubble.push_back(r->bubble_ratio);
      pw.peak = std::max(pw.peak, r->peak_memory_bytes);
    }
    // Reports without wall-clock starts (older workers): the longest rank.
    const double makespan = first > 0 ? last : longest;
    makespans.push_back(makespan);
    // The simulator's definition: idle over the makespan, summed over ranks.
    if (makespan > 0) {
      bubbles.push_back(1 - compute / (static_cast<double>(reports.size()) * makespan));
    }
  }
  out->set_steps(static_cast<int>(makespans.size()));
  out->set_measured_step_seconds(MedianOr(makespans, 0));
  out->set_measured_bubble_ratio(MedianOr(bubbles, 0));
  AddRows(workers, plan, out);
}

}  // namespace pipeplan::server
