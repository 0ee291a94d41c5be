// The median of measured samples, as calibration uses it everywhere (step
// times, per-device factors, transfer times, host overheads): robust to the
// occasional late wake-up that a mean would carry. Pure; no I/O.
#ifndef PIPEPLAN_CORE_MEDIAN_H_
#define PIPEPLAN_CORE_MEDIAN_H_

#include <utility>
#include <vector>

namespace pipeplan {

// The median of `values` (the mean of the two middle ones for an even
// count), or `if_empty` when there are none: callers differ in what "no
// samples" means (a factor of 1, a duration of 0).
double MedianOr(std::vector<double> values, double if_empty);

// y = fixed + scale x over the points, as {fixed, scale}, by Siegel's
// repeated median (each point's median slope to the others, then their
// median): one straggling point does not tilt the line. Through zero
// ({0, median of y / x}) when the x are too alike (within 1.2x) to tell the
// two apart, or the line would have a negative part.
std::pair<double, double> RepeatedMedianLine(const std::vector<double>& x,
                                             const std::vector<double>& y);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_MEDIAN_H_
