// The heartbeat thread (worker_daemon/src/control/control_threads.h) in
// virtual time: it beats every lease/3, registers again when the planner no
// longer knows the worker, and marks the job gone on NOT_FOUND.
#include "control/control_threads.h"

#include "control/control_state.h"
#include "fake_clock.h"
#include "fake_planner.h"
#include "gtest/gtest.h"

namespace pipeplan::worker {
namespace {

using testing::FakeClock;
using testing::FakePlanner;

class ControlThreadsTest : public ::testing::Test {
 protected:
  ControlThreadsTest() : state_(clock_) {
    state_.SetLease(absl::Seconds(3));
    options_.job_id = "job";
    options_.worker_id = "w0";
  }
  // Lets one heartbeat period pass and waits until the thread sleeps again.
  void Beat() {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(clock_.AwaitPendingWait(absl::Seconds(1)));
  }

  FakeClock clock_;
  FakePlanner planner_;
  ControlState state_;
  WorkerOptions options_;
};

TEST_F(ControlThreadsTest, HeartbeatsEveryThirdOfTheLeaseAndLearnsTheVersion) {
  v1::HeartbeatResponse hb;
  hb.set_current_plan_version(4);
  planner_.SetHeartbeat(hb);
  ControlThreads threads(planner_, options_, v1::WorkerInfo(), state_);
  ASSERT_TRUE(clock_.AwaitPendingWait(absl::Seconds(1)));
  EXPECT_EQ(planner_.heartbeat_calls(), 0);
  Beat();
  EXPECT_EQ(planner_.heartbeat_calls(), 1);
  EXPECT_EQ(state_.Latest(), 4);
  hb.set_job_state(v1::JOB_COMPLETED);
  planner_.SetHeartbeat(hb);
  Beat();
  EXPECT_EQ(planner_.heartbeat_calls(), 2);
  EXPECT_TRUE(state_.JobCompleted());
  threads.Stop();
}

TEST_F(ControlThreadsTest, RegistersAgainWhenThePlannerForgotTheWorker) {
  planner_.SetHeartbeat(absl::FailedPreconditionError("unknown worker"));
  ControlThreads threads(planner_, options_, v1::WorkerInfo(), state_);
  ASSERT_TRUE(clock_.AwaitPendingWait(absl::Seconds(1)));
  Beat();
  EXPECT_EQ(planner_.register_calls(), 1);
  EXPECT_FALSE(state_.JobDeleted());
  threads.Stop();
}

TEST_F(ControlThreadsTest, NotFoundMarksTheJobDeleted) {
  planner_.SetHeartbeat(absl::NotFoundError("no job"));
  ControlThreads threads(planner_, options_, v1::WorkerInfo(), state_);
  ASSERT_TRUE(clock_.AwaitPendingWait(absl::Seconds(1)));
  Beat();
  EXPECT_TRUE(state_.JobDeleted());
  EXPECT_EQ(planner_.register_calls(), 0);
  threads.Stop();
}

}  // namespace
}  // namespace pipeplan::worker
