// Step reports with non-finite, negative or absurd timings are refused,
// naming the field; plausible ones (a slow step longer than the lease) pass.
#include "pipeplan/server/rpc/report_guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "pipeplan/server/replan/replan_policy.h"

namespace pipeplan::server {
namespace {

v1::ReportStepRequest Good() {
  v1::ReportStepRequest r;
  r.set_step_seconds(0.02);
  r.set_compute_seconds(0.015);
  r.set_comm_seconds(0.003);
  r.set_bubble_ratio(0.25);
  r.set_peak_memory_bytes(1e6);
  auto* f = r.add_timings();
  f->set_action("0F0");
  f->set_seconds(0.001);
  auto* s = r.add_timings();
  s->set_action("0SEND_F0");
  s->set_seconds(0.0001);
  s->set_bytes(4096);
  return r;
}

TEST(ReportGuard, AcceptsPlausibleReports) {
  EXPECT_TRUE(CheckStepReport(Good(), 0.02, absl::Seconds(10)).ok());
  // 30 s against a 1 ms prediction and a 10 s lease: slow, not garbage.
  v1::ReportStepRequest slow = Good();
  slow.set_step_seconds(30);
  EXPECT_TRUE(CheckStepReport(slow, 1e-3, absl::Seconds(10)).ok());
  // No prediction (0): the lease bounds it.
  EXPECT_TRUE(CheckStepReport(Good(), 0, absl::Seconds(10)).ok());
}

TEST(ReportGuard, RejectsGarbageNamingTheField) {
  struct Case {
    void (*mutate)(v1::ReportStepRequest&);
    std::string field;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  static double bad = 0;
  const Case cases[] = {
      {[](v1::ReportStepRequest& r) { r.set_step_seconds(1e300); }, "step_seconds"},
      {[](v1::ReportStepRequest& r) { r.set_step_seconds(bad); }, "step_seconds"},
      {[](v1::ReportStepRequest& r) { r.set_comm_seconds(-1); }, "comm_seconds"},
      {[](v1::ReportStepRequest& r) { r.mutable_timings(0)->set_seconds(1e300); },
       "timings.seconds"},
      {[](v1::ReportStepRequest& r) { r.mutable_timings(1)->set_seconds(bad); }, "timings.seconds"},
      {[](v1::ReportStepRequest& r) { r.mutable_timings(1)->set_seconds(-0.5); },
       "timings.seconds"},
      {[](v1::ReportStepRequest& r) { r.mutable_timings(1)->set_bytes(-1); }, "timings.bytes"},
      {[](v1::ReportStepRequest& r) { r.set_bubble_ratio(1.5); }, "bubble_ratio"},
  };
  bad = nan;
  for (const Case& c : cases) {
    v1::ReportStepRequest r = Good();
    c.mutate(r);
    std::string field;
    const absl::Status s = CheckStepReport(r, 0.02, absl::Seconds(10), &field);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(field, c.field) << s;
  }
  v1::ReportStepRequest r = Good();
  r.mutable_timings(1)->set_seconds(-0.5);
  EXPECT_NE(
      std::string(CheckStepReport(r, 0.02, absl::Seconds(10)).message()).find("timings[1].seconds"),
      std::string::npos);
}

TEST(ReplanGuard, AbsoluteFloorAndSwitchCost) {
  const ReplanPolicyOptions o;  // 2 ms floor, 1 s assumed switch over 1000 steps
  EXPECT_DOUBLE_EQ(MinGainSeconds(o, 0), 2e-3);
  // A 0.5 ms gain is below the floor.
  EXPECT_LT(0.5e-3, MinGainSeconds(o, 0));
  // A measured 10 s switch over 1000 steps needs 10 ms per step.
  EXPECT_DOUBLE_EQ(MinGainSeconds(o, 10), 10e-3);
  // Over the 100 steps left of a job it needs 100 ms.
  EXPECT_DOUBLE_EQ(MinGainSeconds(o, 10, 100), 0.1);
}

TEST(ReportGuard, SwitchPausesMayBeLongButNotNegativeOrNonFinite) {
  v1::ReportStepRequest r = Good();
  r.set_switch_seconds(600);  // a long compile is not absurd
  EXPECT_TRUE(CheckStepReport(r, 0.02, absl::Seconds(10)).ok());
  r.set_switch_compile_wait_seconds(-1);
  std::string field;
  EXPECT_EQ(CheckStepReport(r, 0.02, absl::Seconds(10), &field).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(field, "switch_compile_wait_seconds");
  r.set_switch_compile_wait_seconds(0);
  r.set_switch_seconds(std::numeric_limits<double>::infinity());
  EXPECT_FALSE(CheckStepReport(r, 0.02, absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace pipeplan::server
