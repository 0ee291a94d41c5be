// The step loop (worker_daemon/src/control/step_loop.h) with a fake planner,
// a fake clock and the in-memory transport: two ranks agree on the plan
// version at every step boundary, switch together, leave together, and
// drop a version that stalls behind a newer one (in a step, a vote or a
// checkpoint barrier) — all without sockets or sleeps.
#include "control/step_loop.h"

#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "control/control_state.h"
#include "fake_clock.h"
#include "fake_planner.h"
#include "gtest/gtest.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/executors/executor_factory.h"
#include "pipeplan/worker/report/report_sender.h"
#include "pipeplan/worker/training/training_session.h"
#include "pipeplan/worker/transport/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

using testing::FakeClock;
using testing::FakePlanner;
using testing::PipelineOn;

// One in-memory hub per plan version: every rank of a version connects to
// the same one, as a rendezvous round would bring them together.
class Hubs {
 public:
  ConnectTransportFn Connector() {
    return [this](const ActivePlan& a) -> absl::StatusOr<std::unique_ptr<Transport>> {
      MemoryHub* hub;
      {
        absl::MutexLock l(&mu_);
        std::unique_ptr<MemoryHub>& h = hubs_[a.version];
        if (!h) h = std::make_unique<MemoryHub>(a.plan.num_ranks * a.plan.num_replicas);
        hub = h.get();
      }
      return hub->Connect(a.plan.WorldRank(a.replica, a.rank));
    };
  }

 private:
  absl::Mutex mu_;
  std::map<int64_t, std::unique_ptr<MemoryHub>> hubs_ ABSL_GUARDED_BY(mu_);
};

// Training over synthetic executors whose checkpoint at `barrier_steps`
// completed steps of version 1 waits for every other rank, as the torch
// session's checkpoint barriers do; the state stays where it is.
class BarrierTraining final : public TrainingSession {
 public:
  BarrierTraining(const WorkerOptions& options, int64_t barrier_steps)
      : options_(options), barrier_steps_(barrier_steps) {}
  void Prepare(int64_t) override {}
  bool Prepared(int64_t) override { return true; }
  SwitchCost LastSwitchCost() const override { return {}; }
  const v1::TrainingSpec& spec() const override { return spec_; }
  v1::JobState job_state() const override { return v1::JOB_RUNNING; }
  absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const StagePlan& plan,
                                                         const ExecutorPlace& place) override {
    return worker::MakeExecutor(options_, plan, v1::ModelGraph(), place);
  }
  absl::StatusOr<int64_t> Resume(const StagePlan& plan, const ExecutorPlace&, Transport& world,
                                 Executor&, Executor*, const StagePlan*, int64_t step) override {
    world_ = &world;
    version_ = plan.version;
    return step;
  }
  absl::Status MaybeCheckpoint(Executor&, int64_t, int64_t steps) override {
    if (steps != barrier_steps_ || version_ != 1) return absl::OkStatus();
    for (int peer = 0; peer < world_->size(); ++peer) {
      if (peer == world_->rank()) continue;
      std::byte b{};
      PIPEPLAN_ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> op,
                                world_->Recv(peer, 77, std::span<std::byte>(&b, 1)));
      PIPEPLAN_RETURN_IF_ERROR(op->Wait(options_.comm_timeout));
    }
    return absl::OkStatus();
  }
  absl::Status CheckpointNow(Executor&, int64_t, int64_t) override { return absl::OkStatus(); }

 private:
  const WorkerOptions& options_;
  const int64_t barrier_steps_;
  v1::TrainingSpec spec_;
  Transport* world_ = nullptr;
  int64_t version_ = 0;
};

// One worker's control plane: its state, report sender and step loop.
struct Rank {
  Rank(FakePlanner& planner, FakeClock& clock, Hubs& hubs, const std::string& device,
       int64_t barrier_steps = -1)
      : options(OptionsFor(device)),
        state(clock),
        reports(
            planner, options, [this](int64_t v) { state.SawVersion(v); }, nullptr, "run-" + device,
            clock),
        training(options, barrier_steps),
        loop(planner, options, state, stop, nullptr, barrier_steps >= 0 ? &training : nullptr,
             reports, clock, hubs.Connector()) {
    state.SawVersion(1);
  }
  static WorkerOptions OptionsFor(const std::string& device) {
    WorkerOptions o;
    o.job_id = "job";
    o.worker_id = "w-" + device;
    o.device_id = device;
    o.time_scale = 0;  // the synthetic executor computes nothing
    // Bounds a vote or step that never completes (a failing test).
    o.comm_timeout = absl::Seconds(20);
    return o;
  }
  // Runs the loop on a thread of its own until it returns.
  void Start(int64_t steps) {
    options.steps = steps;
    done = std::make_unique<absl::Notification>();
    thread = std::thread([this] {
      result = loop.Run();
      done->Notify();
    });
  }
  // The loop's result. A loop that does not return within a minute fails
  // the test and is stopped: its waits end (Shutdown), a transport wait at
  // the latest after comm_timeout.
  absl::Status Join() {
    if (!done->WaitForNotificationWithTimeout(absl::Seconds(60))) {
      ADD_FAILURE() << options.worker_id << ": the step loop did not return";
      stop.store(true);
      state.Shutdown();
    }
    thread.join();
    return result;
  }

  WorkerOptions options;
  ControlState state;
  std::atomic<bool> stop{false};
  ReportSender reports;
  BarrierTraining training;
  StepLoop loop;
  std::thread thread;
  std::unique_ptr<absl::Notification> done;
  absl::Status result;
};

// Plan version of each step `worker` reported, by step.
std::map<int64_t, int64_t> VersionByStep(const std::vector<v1::ReportStepRequest>& reports,
                                         const std::string& worker) {
  std::map<int64_t, int64_t> out;
  for (const v1::ReportStepRequest& r : reports) {
    if (r.worker_id() == worker) out[r.step()] = r.plan_version();
  }
  return out;
}

int Count(const std::vector<int64_t>& v, int64_t x) {
  return static_cast<int>(std::count(v.begin(), v.end(), x));
}

class StepLoopTest : public ::testing::Test {
 protected:
  StepLoopTest() {
    planner_.AddPlan(1, PipelineOn({"d0", "d1"}, 2, 1));
    r0_ = std::make_unique<Rank>(planner_, clock_, hubs_, "d0");
    r1_ = std::make_unique<Rank>(planner_, clock_, hubs_, "d1");
  }
  // Both ranks run `steps` steps of version 1 together.
  void RunTwoStepsOnVersionOne() {
    r0_->Start(2);
    r1_->Start(2);
    ASSERT_TRUE(r0_->Join().ok());
    ASSERT_TRUE(r1_->Join().ok());
    ASSERT_EQ(r0_->loop.steps(), 2);
    ASSERT_EQ(r1_->loop.plan_version(), 1);
  }
  // Steps virtual time forward a poll at a time, waiting each time until a
  // stall watch polled, until a rank fetches `version` (it gave the running
  // one up): the virtual time then, else InfiniteFuture. Virtual time may
  // run ahead of a busy machine's ranks; only real time bounds the loop.
  absl::Time AdvanceUntilFetched(int64_t version) {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up) {
      clock_.Advance(absl::Milliseconds(100));
      if (!clock_.AwaitPendingWait(absl::Milliseconds(100))) {
        ADD_FAILURE() << "nothing waits on the clock";
        break;
      }
      if (Count(planner_.fetched_versions(), version) > 0) return clock_.Now();
    }
    return absl::InfiniteFuture();
  }
  bool AwaitReportsOf(const std::string& worker, size_t n) {
    return planner_.AwaitReports(
        [&](const auto& reports) { return VersionByStep(reports, worker).size() >= n; });
  }

  FakePlanner planner_;
  FakeClock clock_;
  Hubs hubs_;
  std::unique_ptr<Rank> r0_;
  std::unique_ptr<Rank> r1_;
};

TEST_F(StepLoopTest, AVersionOneRankKnowsReachesEveryRankAtTheNextBoundary) {
  planner_.AddPlan(2, PipelineOn({"d0", "d1"}, 4, 2));
  RunTwoStepsOnVersionOne();
  // Only rank 0 hears of version 2; rank 1 learns it from the vote.
  r0_->state.SawVersion(2);
  EXPECT_EQ(r1_->state.Latest(), 1);
  r0_->Start(4);
  r1_->Start(4);
  ASSERT_TRUE(r0_->Join().ok());
  ASSERT_TRUE(r1_->Join().ok());

  EXPECT_EQ(r1_->state.Latest(), 2);
  EXPECT_EQ(Count(planner_.fetched_versions(), 2), 2) << "each rank fetches version 2 once";
  ASSERT_TRUE(AwaitReportsOf("w-d0", 4));
  ASSERT_TRUE(AwaitReportsOf("w-d1", 4));
  // Both switch at the boundary after step 1: no step lost, none repeated.
  const std::map<int64_t, int64_t> expected{{0, 1}, {1, 1}, {2, 2}, {3, 2}};
  EXPECT_EQ(VersionByStep(planner_.reports(), "w-d0"), expected);
  EXPECT_EQ(VersionByStep(planner_.reports(), "w-d1"), expected);
  EXPECT_EQ(r0_->loop.plan_version(), 2);
  EXPECT_TRUE(r1_->loop.trained_to_the_end());
}

TEST_F(StepLoopTest, AStoppedRankLeavesAtTheBoundaryAndTheOtherSwitchesWithoutIt) {
  planner_.AddPlan(2, PipelineOn({"d1"}, 2, 2));
  RunTwoStepsOnVersionOne();
  r0_->stop.store(true);
  r0_->Start(0);
  r1_->Start(4);
  ASSERT_TRUE(r0_->Join().ok());
  EXPECT_TRUE(r0_->loop.left());
  EXPECT_FALSE(r0_->loop.whole_job_left());
  EXPECT_EQ(r0_->loop.steps(), 2);
  // Rank 1 dropped version 1 and polls (every 50 ms) for the planner's
  // next version; it arrives while it waits.
  ASSERT_TRUE(clock_.AwaitPendingWait(absl::Milliseconds(50)));
  r1_->state.SawVersion(2);
  clock_.Advance(absl::Milliseconds(50));
  ASSERT_TRUE(r1_->Join().ok());
  EXPECT_FALSE(r1_->loop.left());
  ASSERT_TRUE(AwaitReportsOf("w-d1", 4));
  const std::map<int64_t, int64_t> expected{{0, 1}, {1, 1}, {2, 2}, {3, 2}};
  EXPECT_EQ(VersionByStep(planner_.reports(), "w-d1"), expected);
  ASSERT_TRUE(AwaitReportsOf("w-d0", 2));
  EXPECT_EQ(VersionByStep(planner_.reports(), "w-d0").size(), 2u)
      << "rank 0 ran no step after leaving";
}

TEST_F(StepLoopTest, AVoteOnAHungPeerEndsOnlyAfterTheGraceOnceANewerVersionIsKnown) {
  planner_.AddPlan(2, PipelineOn({"d0"}, 2, 2));
  RunTwoStepsOnVersionOne();
  // Rank 1 hangs (it never votes again); the planner has a version without
  // it, which rank 0 knows.
  r0_->state.SawVersion(2);
  const absl::Time start = clock_.Now();
  const absl::Duration grace = r0_->state.Lease();  // longer than any step
  // Only the stall watch may end the vote: the transport's own timeout
  // lies beyond the real-time bound of the loop below.
  r0_->options.comm_timeout = absl::Seconds(120);
  r0_->Start(4);
  const absl::Time switched = AdvanceUntilFetched(2);
  ASSERT_TRUE(r0_->Join().ok());
  ASSERT_NE(switched, absl::InfiniteFuture()) << "rank 0 never gave version 1 up";
  EXPECT_GE(switched - start, grace) << "aborted before the grace";
  ASSERT_TRUE(AwaitReportsOf("w-d0", 4));
  const std::map<int64_t, int64_t> expected{{0, 1}, {1, 1}, {2, 2}, {3, 2}};
  EXPECT_EQ(VersionByStep(planner_.reports(), "w-d0"), expected);
}

// Issue 26: rank 1 hangs (no socket closes) while rank 0 waits for it in a
// checkpoint barrier after its second step, outside the step and the vote.
// Once the planner publishes a version without rank 1's device, rank 0
// gives the barrier up after the shrink grace, not after the comm timeout,
// and trains on.
TEST_F(StepLoopTest, ACheckpointBarrierOnAHungPeerEndsOnceAVersionLeavesItOut) {
  planner_.AddPlan(2, PipelineOn({"d0"}, 2, 2));
  r0_ = std::make_unique<Rank>(planner_, clock_, hubs_, "d0", /*barrier_steps=*/2);
  r1_ = std::make_unique<Rank>(planner_, clock_, hubs_, "d1", /*barrier_steps=*/0);
  r0_->options.comm_timeout = absl::Seconds(120);
  r0_->Start(4);
  r1_->Start(2);  // returns after two steps and never answers again
  ASSERT_TRUE(r1_->Join().ok());
  ASSERT_TRUE(AwaitReportsOf("w-d0", 2));
  r0_->state.SawVersion(2);
  const absl::Time start = clock_.Now();
  const absl::Time switched = AdvanceUntilFetched(2);
  ASSERT_NE(switched, absl::InfiniteFuture()) << "rank 0 waited in the barrier";
  ASSERT_TRUE(r0_->Join().ok());
  EXPECT_GE(switched - start, absl::Seconds(1)) << "aborted before the shrink grace";
  ASSERT_TRUE(AwaitReportsOf("w-d0", 4));
  const std::map<int64_t, int64_t> expected{{0, 1}, {1, 1}, {2, 2}, {3, 2}};
  EXPECT_EQ(VersionByStep(planner_.reports(), "w-d0"), expected);
}

}  // namespace
}  // namespace pipeplan::worker
