#include "disturbed_steps.h"

#include <map>
#include <string>
#include <utility>

#include "pipeplan/core/median.h"

namespace pipeplan::server {

std::vector<StepSample> WithoutDisturbedSteps(std::vector<StepSample> samples) {
  std::map<std::pair<std::string, int64_t>, int> attempts;  // (worker, step) -> reports
  std::map<std::string, std::vector<double>> seconds;       // worker -> step seconds
  for (const StepSample& s : samples) {
    ++attempts[{s.worker_id, s.step}];
    if (s.step_seconds > 0) seconds[s.worker_id].push_back(s.step_seconds);
  }
  std::map<std::string, double> median;
  for (auto& [worker, v] : seconds) median[worker] = MedianOr(std::move(v), 0);
  std::erase_if(samples, [&](const StepSample& s) {
    if (attempts[{s.worker_id, s.step}] > 1) return true;
    const double m = median[s.worker_id];
    return m > 0 && s.step_seconds > kStretchFactor * m;
  });
  return samples;
}

}  // namespace pipeplan::server
