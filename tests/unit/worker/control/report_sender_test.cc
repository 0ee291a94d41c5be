// The report sender (pipeplan/worker/report/report_sender.h) against a fake
// planner, with its backoff in virtual time: which answers it retries, how
// long it waits between tries, what it drops, and that its buffer is bounded.
#include "pipeplan/worker/report/report_sender.h"

#include <atomic>
#include <vector>

#include "fake_clock.h"
#include "fake_planner.h"
#include "gtest/gtest.h"

namespace pipeplan::worker {
namespace {

using testing::FakeClock;
using testing::FakePlanner;

v1::ReportStepRequest Report(int64_t step) {
  v1::ReportStepRequest r;
  r.set_job_id("job");
  r.set_worker_id("w0");
  r.set_step(step);
  r.set_plan_version(1);
  return r;
}

class ReportSenderTest : public ::testing::Test {
 protected:
  ReportSender& Sender(size_t capacity = 10'000) {
    sender_ = std::make_unique<ReportSender>(
        planner_, options_, [this](int64_t v) { seen_version_.store(v); }, nullptr, "run-1", clock_,
        capacity);
    return *sender_;
  }
  // Waits until the sender has made `calls` ReportStep calls and sleeps
  // again (a backoff of `backoff`), or has delivered everything.
  void AwaitBackoff(absl::Duration backoff) { ASSERT_TRUE(clock_.AwaitPendingWait(backoff)); }

  FakePlanner planner_;
  FakeClock clock_;
  WorkerOptions options_;
  std::atomic<int64_t> seen_version_{0};
  std::unique_ptr<ReportSender> sender_;
};

TEST_F(ReportSenderTest, RetriesRetryableCodesWithADoublingBackoffCappedAtTwoSeconds) {
  planner_.FailNextReports(
      {absl::UnavailableError("restarting"), absl::DeadlineExceededError("slow"),
       absl::ResourceExhaustedError("store full"), absl::UnavailableError("again"),
       absl::UnavailableError("again"), absl::UnavailableError("and again")});
  ReportSender& sender = Sender();
  EXPECT_EQ(sender.Add(Report(0)), "ok");
  // Each failed try waits twice as long as the one before, up to 2 s.
  for (absl::Duration backoff :
       {absl::Milliseconds(100), absl::Milliseconds(200), absl::Milliseconds(400),
        absl::Milliseconds(800), absl::Milliseconds(1600), absl::Seconds(2)}) {
    AwaitBackoff(backoff);
    EXPECT_EQ(planner_.reports().size(), 0u);
    EXPECT_EQ(sender.buffered(), 1u);
    clock_.Advance(backoff);
  }
  ASSERT_TRUE(planner_.AwaitReports([](const auto& r) { return r.size() == 1; }));
  EXPECT_EQ(planner_.report_calls(), 7);
  EXPECT_TRUE(sender.Flush(absl::Seconds(30)));
  const v1::ReportStepRequest delivered = planner_.reports()[0];
  EXPECT_EQ(delivered.step(), 0);
  EXPECT_EQ(delivered.run_id(), "run-1");
  EXPECT_EQ(delivered.seq(), 1);
}

TEST_F(ReportSenderTest, AReportThePlannerRefusesForGoodIsDroppedWithoutRetry) {
  planner_.FailNextReports({absl::InvalidArgumentError("bad report")});
  ReportSender& sender = Sender();
  sender.Add(Report(0));
  sender.Add(Report(1));
  // The refused report is not tried again; the next goes out at once, with
  // no backoff in between.
  ASSERT_TRUE(planner_.AwaitReports([](const auto& r) { return r.size() == 1; }));
  EXPECT_TRUE(sender.Flush(absl::Seconds(30)));
  EXPECT_EQ(planner_.report_calls(), 2);
  EXPECT_EQ(planner_.reports()[0].step(), 1);
  EXPECT_EQ(planner_.reports()[0].seq(), 2);
  EXPECT_TRUE(clock_.PendingTimeouts().empty());
}

TEST_F(ReportSenderTest, AnUnknownWorkerKeepsItsReportUntilTheHeartbeatAnswers) {
  // FAILED_PRECONDITION: the sender asks Heartbeat; while the planner does
  // not know the worker the report waits and is tried again.
  planner_.FailNextReports({absl::FailedPreconditionError("unknown worker"),
                            absl::FailedPreconditionError("stale version")});
  planner_.SetHeartbeat(absl::FailedPreconditionError("unknown worker"));
  ReportSender& sender = Sender();
  sender.Add(Report(0));
  AwaitBackoff(absl::Milliseconds(100));
  EXPECT_EQ(planner_.heartbeat_calls(), 1);
  EXPECT_EQ(sender.buffered(), 1u);
  // Now the worker is known (the heartbeat thread registered it again): the
  // answer's version is learned and the report, refused for its version,
  // is dropped.
  v1::HeartbeatResponse hb;
  hb.set_current_plan_version(7);
  planner_.SetHeartbeat(hb);
  clock_.Advance(absl::Milliseconds(100));
  EXPECT_TRUE(sender.Flush(absl::Seconds(30)));
  EXPECT_EQ(planner_.heartbeat_calls(), 2);
  EXPECT_EQ(seen_version_.load(), 7);
  EXPECT_TRUE(planner_.reports().empty());
}

TEST_F(ReportSenderTest, AFullBufferDropsTheOldestReport) {
  planner_.FailNextReports({absl::UnavailableError("down")});
  ReportSender& sender = Sender(/*capacity=*/2);
  EXPECT_EQ(sender.Add(Report(0)), "ok");
  AwaitBackoff(absl::Milliseconds(100));  // report 0 failed once; it waits
  EXPECT_EQ(sender.Add(Report(1)), "ok");
  EXPECT_EQ(sender.Add(Report(2)), "dropped_oldest");
  EXPECT_EQ(sender.buffered(), 2u);
  clock_.Advance(absl::Milliseconds(100));
  ASSERT_TRUE(planner_.AwaitReports([](const auto& r) { return r.size() == 2; }));
  EXPECT_EQ(planner_.reports()[0].step(), 1);
  EXPECT_EQ(planner_.reports()[1].step(), 2);
}

}  // namespace
}  // namespace pipeplan::worker
