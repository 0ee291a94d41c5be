// Which step reports calibration must not learn from: steps disturbed by a
// failure or a switch rather than slowed by their device. Private to the
// replan library (calibrated_model.cc).
//
// Issue 26: a rejoin was refused on factors "cpu0:684 cpu1:8157 cpu3:388",
// fitted from steps around a kill. The warm-up drops each worker's first
// steps of a version; this drops the rest of what a failure or switch leaves
// behind:
//  * a step number a worker reported more than once in the version: the
//    version was built again after a failure (a peer restarted in place)
//    and the earlier attempts ran while a peer was failing;
//  * a step whose wall time is more than kStretchFactor times the worker's
//    median in the window: stretched by a peer's failure, a plan switch
//    compiling beside it or a restarted process competing for the host. A
//    device that is slow all the time moves its median too and is kept.
#ifndef PIPEPLAN_SERVER_REPLAN_DISTURBED_STEPS_H_
#define PIPEPLAN_SERVER_REPLAN_DISTURBED_STEPS_H_

#include <vector>

#include "pipeplan/core/calibration.h"

namespace pipeplan::server {

inline constexpr double kStretchFactor = 4.0;

std::vector<StepSample> WithoutDisturbedSteps(std::vector<StepSample> samples);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_REPLAN_DISTURBED_STEPS_H_
