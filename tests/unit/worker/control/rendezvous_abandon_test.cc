// The step loop with its real rendezvous (rounds over the fake planner's
// key-value space, Gloo on 127.0.0.1): a worker waiting in version N's
// rendezvous for a peer that never comes moves on to version N+1 as soon as
// it knows of it, instead of waiting out its connect timeout (issue 26:
// survivors of a kill sat 30-90 s in RendezvousGet, and a worker ignored a
// newer version for about 4 minutes).
#include <atomic>
#include <map>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "control/control_state.h"
#include "control/step_loop.h"
#include "fake_planner.h"
#include "gtest/gtest.h"
#include "pipeplan/worker/report/report_sender.h"

namespace pipeplan::worker {
namespace {

using testing::FakePlanner;
using testing::PipelineOn;

WorkerOptions OptionsFor(const std::string& device, absl::Duration connect_timeout) {
  WorkerOptions o;
  o.job_id = "job";
  o.worker_id = "w-" + device;
  o.device_id = device;
  o.time_scale = 0;  // the synthetic executor computes nothing
  o.connect_timeout = connect_timeout;
  o.comm_timeout = absl::Seconds(20);
  o.steps = 2;
  return o;
}

// True once `key` is set in the fake planner's rendezvous space, polled at
// most `limit` (real time): the event the test waits on.
bool AwaitKey(FakePlanner& planner, const std::string& key, absl::Duration limit) {
  const absl::Time give_up = absl::Now() + limit;
  while (absl::Now() < give_up) {
    absl::StatusOr<std::optional<std::string>> v = planner.RendezvousGet("job", key);
    if (v.ok() && v->has_value()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

TEST(RendezvousAbandon, AWaitForAPeerThatNeverComesEndsWhenANewerVersionIsKnown) {
  FakePlanner planner;
  planner.AddPlan(1, PipelineOn({"d0", "d1"}, 2, 1));  // d1 never comes
  planner.AddPlan(2, PipelineOn({"d0"}, 2, 2));        // the version without it
  const absl::Duration connect_timeout = absl::Seconds(30);
  WorkerOptions options = OptionsFor("d0", connect_timeout);
  ControlState state;
  std::atomic<bool> stop{false};
  ReportSender reports(
      planner, options, [&state](int64_t v) { state.SawVersion(v); }, nullptr, "run-d0",
      RealClock());
  StepLoop loop(planner, options, state, stop, nullptr, nullptr, reports);
  state.SawVersion(1);
  absl::Status result;
  absl::Notification done;
  std::thread t([&] {
    result = loop.Run();
    done.Notify();
  });
  // Rank 0 of version 1 announced itself and waits for rank 1's nonce.
  ASSERT_TRUE(AwaitKey(planner, "v1/gloo/nonce/0", absl::Seconds(20)));
  const absl::Time published = absl::Now();
  state.SawVersion(2);
  const bool returned = done.WaitForNotificationWithTimeout(connect_timeout);
  const absl::Duration took = absl::Now() - published;
  if (!returned) {
    ADD_FAILURE() << "the worker still waits in version 1's rendezvous";
    stop.store(true);
    state.Shutdown();
  }
  t.join();
  ASSERT_TRUE(result.ok()) << result;
  EXPECT_EQ(loop.plan_version(), 2);
  EXPECT_EQ(loop.steps(), 2);
  EXPECT_LT(took, connect_timeout / 3) << "the wait ran into the connect timeout";
  ASSERT_TRUE(planner.AwaitReports([](const auto& r) { return r.size() >= 2; }));
  for (const v1::ReportStepRequest& r : planner.reports()) EXPECT_EQ(r.plan_version(), 2);
}

}  // namespace
}  // namespace pipeplan::worker
