#include "pipeplan/core/median.h"

#include <algorithm>

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

}  // namespace pipeplan
