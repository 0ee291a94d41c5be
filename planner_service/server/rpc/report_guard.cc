#include "pipeplan/server/rpc/report_guard.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pipeplan::server {
namespace {

struct Check {
  std::string* field;
  double limit;  // seconds

  // Non-finite or negative values; `seconds` ones also above the limit.
  absl::Status operator()(const std::string& name, double v, bool seconds) const {
    const char* what = nullptr;
    if (!std::isfinite(v)) {
      what = "is not finite";
    } else if (v < 0) {
      what = "is negative";
    } else if (seconds && v > limit) {
      what = "is absurd";
    }
    if (what == nullptr) return absl::OkStatus();
    if (field) *field = name;
    return absl::InvalidArgumentError(
        seconds && std::isfinite(v) && v > 0
            ? absl::StrCat("report.", name, " ", what, ": ", v, " s is above ", limit,
                           " s (1e6 x the predicted step, or the lease)")
            : absl::StrCat("report.", name, " ", what, ": ", v));
  }
};

}  // namespace

absl::Status CheckStepReport(const v1::ReportStepRequest& report, double predicted_step_seconds,
                             absl::Duration lease, std::string* field) {
  const double predicted = std::isfinite(predicted_step_seconds) && predicted_step_seconds > 0
                               ? predicted_step_seconds
                               : 0;
  const Check check{field,
                    std::max(kAbsurdPredictionMultiple * predicted, absl::ToDoubleSeconds(lease))};
  auto first_error = [](std::initializer_list<absl::Status> all) {
    for (const absl::Status& s : all) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
  absl::Status s = first_error(
      {check("step_seconds", report.step_seconds(), true),
       check("compute_seconds", report.compute_seconds(), true),
       check("comm_seconds", report.comm_seconds(), true),
       check("peak_memory_bytes", report.peak_memory_bytes(), false),
       // A switch may compile for minutes: no step-sized limit.
       check("switch_seconds", report.switch_seconds(), false),
       check("switch_compile_wait_seconds", report.switch_compile_wait_seconds(), false)});
  if (!s.ok()) return s;
  if (!(report.bubble_ratio() >= 0 && report.bubble_ratio() <= 1)) {
    if (field) *field = "bubble_ratio";
    return absl::InvalidArgumentError(
        absl::StrCat("report.bubble_ratio is ", report.bubble_ratio(), ", not in [0, 1]"));
  }
  for (int i = 0; i < report.timings_size(); ++i) {
    const v1::ActionTiming& t = report.timings(i);
    const std::string at = absl::StrCat("timings[", i, "].");
    s = first_error({check(at + "seconds", t.seconds(), true),
                     check(at + "start_seconds", t.start_seconds(), true),
                     check(at + "wait_seconds", t.wait_seconds(), true),
                     check(at + "bytes", t.bytes(), false)});
    if (!s.ok()) {
      // Count by the field's name, not per index (bounded label values).
      if (field) *field = field->substr(field->find('.') + 1);
      if (field) *field = "timings." + *field;
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace pipeplan::server
