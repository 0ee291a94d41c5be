// Step reports and link fits between the wire (pipeplan.v1) and the core's
// plain structs: what calibration, link fitting and timelines read.
//
// Reentrant.
#ifndef PIPEPLAN_CONVERT_REPORT_CONVERT_H_
#define PIPEPLAN_CONVERT_REPORT_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "pipeplan/core/calibration.h"
#include "pipeplan/core/link_calibration.h"
#include "pipeplan/v1/plan.pb.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan {

// `device_id` is the reporting worker's device (reports do not carry it).
StepSample StepSampleFromProto(const v1::ReportStepRequest& report, const std::string& device_id);

v1::LinkFit LinkFitToProto(const FittedLink& link);
// INVALID_ARGUMENT for an unknown scope.
absl::StatusOr<FittedLink> LinkFitFromProto(const v1::LinkFit& link);

}  // namespace pipeplan

#endif  // PIPEPLAN_CONVERT_REPORT_CONVERT_H_
