#include "pipeplan/core/median.h"

#include <algorithm>
#include <cmath>

namespace pipeplan {

double MedianOr(std::vector<double> values, double if_empty) {
  if (values.empty()) return if_empty;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double hi = values[mid];
  if (values.size() % 2 == 1) return hi;
  const double lo = *std::max_element(values.begin(), values.begin() + mid);
  return (lo + hi) / 2;
}

std::pair<double, double> RepeatedMedianLine(const std::vector<double>& x,
                                             const std::vector<double>& y) {
  std::vector<double> ratios;
  double lo = INFINITY, hi = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] > 0) ratios.push_back(y[i] / x[i]);
    lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  }
  const std::pair<double, double> through_zero = {0, MedianOr(ratios, 1)};
  if (x.size() < 2 || !(hi > 1.2 * lo)) return through_zero;
  std::vector<double> slopes;
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> mine;
    for (size_t j = 0; j < x.size(); ++j) {
      if (j != i && x[j] != x[i]) mine.push_back((y[j] - y[i]) / (x[j] - x[i]));
    }
    if (!mine.empty()) slopes.push_back(MedianOr(mine, 0));
  }
  const double scale = MedianOr(slopes, 0);
  std::vector<double> fixed;
  for (size_t i = 0; i < x.size(); ++i) fixed.push_back(y[i] - scale * x[i]);
  const double intercept = MedianOr(fixed, 0);
  if (scale < 0 || intercept < 0) return through_zero;
  return {intercept, scale};
}

}  // namespace pipeplan
