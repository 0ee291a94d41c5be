#include "membership_decision.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pipeplan::server {
namespace {

// Whether `plan` runs a stage (of any replica) on one of `devices`.
bool UsesAny(const v1::Plan& plan, const std::set<std::string>& devices) {
  for (const v1::Stage& s : plan.stages()) {
    if (devices.contains(s.device_id())) return true;
  }
  for (const v1::Replica& r : plan.replicas()) {
    for (const std::string& d : r.rank_device_ids()) {
      if (devices.contains(d)) return true;
    }
  }
  return false;
}

}  // namespace

bool IsMembershipTrigger(ReplanTrigger trigger) {
  return trigger == ReplanTrigger::kWorkerLost || trigger == ReplanTrigger::kWorkerJoined;
}

std::optional<std::string> MembershipSkip(ReplanTrigger trigger, const ReplanOutcome& outcome,
                                          const v1::Plan& next, const std::set<std::string>& joined,
                                          const v1::PlanCalibration& measured) {
  if (trigger != ReplanTrigger::kWorkerJoined) return std::nullopt;
  if (!UsesAny(next, joined)) {
    return absl::StrFormat("the new plan leaves the joined devices (%s) out",
                           absl::StrJoin(joined, ","));
  }
  const bool any_measured = std::any_of(
      measured.devices().begin(), measured.devices().end(),
      [&](const v1::DeviceFactor& f) { return joined.contains(f.device_id()) && f.samples() > 0; });
  if (!any_measured) return std::nullopt;
  const double cur = outcome.current_step_seconds;
  if (std::isinf(cur) || !(cur > 0)) return std::nullopt;
  const double loss = (outcome.new_step_seconds - cur) / cur;
  if (loss <= kRejoinMaxPredictedLoss) return std::nullopt;
  return absl::StrFormat(
      "the plan with the joined devices is measurably slower: %.4g s -> %.4g s per step (%.1f%% "
      "slower, more than %.0f%%)",
      cur, outcome.new_step_seconds, loss * 100, kRejoinMaxPredictedLoss * 100);
}

}  // namespace pipeplan::server
