// A worker's report of a failed transport (HeartbeatRequest.failed_version,
// unreachable_devices): the planner declares a peer that never reports the
// failure itself lost within the suspect grace instead of a lease (issue 26:
// detection within a second), and believes a peer that reports it alive.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/store/store.h"
#include "unit/server/test_util.h"

namespace pipeplan::server {
namespace {

v1::Plan PlanOn(const std::vector<std::string>& devices) {
  v1::Plan p;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto* s = p.add_stages();
    s->set_index(static_cast<int>(i));
    s->set_device_id(devices[i]);
  }
  return p;
}

v1::HeartbeatRequest FailureReport(const std::string& job, const std::string& worker,
                                   int64_t version, const std::vector<std::string>& unreachable) {
  v1::HeartbeatRequest r;
  r.set_job_id(job);
  r.set_worker_id(worker);
  r.set_failed_version(version);
  for (const std::string& d : unreachable) r.add_unreachable_devices(d);
  return r;
}

// A worker's WatchPlan stream: open while the test holds it.
class OpenWatch : public PlanWatcher {
 public:
  void OnPlan(std::shared_ptr<const v1::PlanUpdate>) override {}
  void OnClose(const absl::Status&) override {}
};

class PeerFailureTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogEnabled(false); }
  // A job with a rank on gpu0..gpu<n-1>, each device on host `hosts[d]`, and
  // a worker w<d> on each, watching the job's plan as every worker does.
  void Start(const std::vector<std::string>& hosts) {
    store_ = NewMemoryStore();
    registry_ = std::make_unique<JobRegistry>(
        store_.get(), &clock_,
        JobRegistry::Options{.lease = absl::Seconds(10), .suspect_grace = absl::Seconds(1)});
    v1::PlanRequest request = testing::SmallRequest();
    std::vector<std::string> devices;
    for (size_t d = 0; d < hosts.size(); ++d) {
      request.mutable_cluster()->mutable_devices(d)->set_host(hosts[d]);
      devices.push_back(absl::StrCat("gpu", d));
    }
    auto job = registry_->CreateJob("j", request, PlanOn(devices));
    ASSERT_TRUE(job.ok()) << job.status();
    id_ = job->id();
    for (size_t d = 0; d < hosts.size(); ++d) {
      v1::WorkerInfo w;
      w.set_worker_id(absl::StrCat("w", d));
      w.set_device_id(absl::StrCat("gpu", d));
      ASSERT_TRUE(registry_->RegisterWorker(id_, w).ok());
      watches_.push_back(std::make_shared<OpenWatch>());
      ASSERT_TRUE(registry_->Watch(id_, w.worker_id(), 1, watches_.back()).ok());
    }
  }
  // Worker w<d>'s process died: gRPC ended its watch stream.
  void CloseWatch(int d) { watches_[d].reset(); }
  void ReopenWatch(int d) {
    watches_[d] = std::make_shared<OpenWatch>();
    ASSERT_TRUE(registry_->Watch(id_, absl::StrCat("w", d), 1, watches_[d]).ok());
  }
  void TearDown() override { SetLogEnabled(true); }

  v1::WorkerState StateOf(const std::string& worker) {
    absl::StatusOr<v1::Job> job = registry_->GetJob(id_);
    EXPECT_TRUE(job.ok());
    for (const v1::WorkerStatus& w : job->workers()) {
      if (w.info().worker_id() == worker) return w.state();
    }
    return v1::WORKER_STATE_UNSPECIFIED;
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<JobRegistry> registry_;
  std::string id_;
  std::vector<std::shared_ptr<OpenWatch>> watches_;
};

TEST_F(PeerFailureTest, APeerThatNeverReportsTheFailureIsLostWithinTheGrace) {
  ASSERT_NO_FATAL_FAILURE(Start({"h0", "h1", "h2"}));
  // w2 died: w1's sockets to it reset. w0 and w1 report the failure.
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w1", 1, {"gpu2", "gpu0"})).ok());
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w0", 1, {"gpu1"})).ok());
  clock_.Advance(absl::Milliseconds(900));
  EXPECT_EQ(registry_->CheckLeases(), 0) << "within the grace";
  clock_.Advance(absl::Milliseconds(200));
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(StateOf("w2"), v1::WORKER_LOST);
  // w0 was named too, but reported the same failure itself: alive.
  EXPECT_EQ(StateOf("w0"), v1::WORKER_ACTIVE);
  EXPECT_EQ(StateOf("w1"), v1::WORKER_ACTIVE);
}

TEST_F(PeerFailureTest, ALivePeerThatReportsLaterKeepsItsLease) {
  ASSERT_NO_FATAL_FAILURE(Start({"h0", "h1", "h2"}));
  // w0's report names w1 before w1's own report arrives.
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w0", 1, {"gpu1"})).ok());
  clock_.Advance(absl::Milliseconds(300));
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w1", 1, {"gpu0"})).ok());
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(registry_->Heartbeat(id_, "w2").ok());
  EXPECT_EQ(registry_->CheckLeases(), 0);
  // A report of an older version's failure shortens nobody's lease.
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w2", 1, {"gpu0", "gpu1"})).ok());
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(registry_->CheckLeases(), 0);
  // Without a report at all, the lease decides as before.
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(registry_->CheckLeases(), 3);
}

// A lost host: w2 and w3 share host "b" and die together; the survivors
// only talked to w2. w3 is suspected as w2's host mate (half a lease: a
// live one heartbeats within it), w1 on host "a" is not.
TEST_F(PeerFailureTest, TheHostMatesOfAnUnreachablePeerAreSuspectsToo) {
  ASSERT_NO_FATAL_FAILURE(Start({"a", "a", "b", "b"}));
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w1", 1, {"gpu2"})).ok());
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w0", 1, {"gpu1"})).ok());
  clock_.Advance(absl::Milliseconds(1100));
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(StateOf("w2"), v1::WORKER_LOST);
  EXPECT_EQ(StateOf("w3"), v1::WORKER_ACTIVE) << "a host mate has half a lease";
  clock_.Advance(absl::Seconds(4));
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(StateOf("w3"), v1::WORKER_LOST);
  EXPECT_EQ(StateOf("w0"), v1::WORKER_ACTIVE);
  EXPECT_EQ(StateOf("w1"), v1::WORKER_ACTIVE);
}

// A killed worker's watch stream ends as its sockets close: once a peer
// names it, it is lost at the next lease check, not after the grace; so
// are its host mates whose streams closed too (a lost host within about a
// second, not half a lease). A suspect whose watch is open keeps the grace.
TEST_F(PeerFailureTest, ASuspectWhoseWatchClosedIsLostAtTheNextCheck) {
  ASSERT_NO_FATAL_FAILURE(Start({"a", "a", "b", "b"}));
  CloseWatch(3);
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w1", 1, {"gpu2"})).ok());
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w0", 1, {"gpu1"})).ok());
  EXPECT_EQ(registry_->CheckLeases(), 1) << "w3: a host mate without a watch";
  EXPECT_EQ(StateOf("w3"), v1::WORKER_LOST);
  EXPECT_EQ(StateOf("w2"), v1::WORKER_ACTIVE) << "named, but its watch is open: the grace";
  // w2's stream ends after the report named it: the next check decides.
  clock_.Advance(absl::Milliseconds(100));
  CloseWatch(2);
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(StateOf("w2"), v1::WORKER_LOST);
  EXPECT_EQ(StateOf("w0"), v1::WORKER_ACTIVE);
  EXPECT_EQ(StateOf("w1"), v1::WORKER_ACTIVE);
}

// Nobody named it (killed while no peer talked to it: in a plan switch, a
// rendezvous): a watch closed for two graces is lost then, not after a
// lease; one reopened within them (a worker reconnecting to the planner,
// 100 ms of backoff) costs nobody a lease.
TEST_F(PeerFailureTest, AWatchClosedForTwoGracesIsLost) {
  ASSERT_NO_FATAL_FAILURE(Start({"h0", "h1", "h2"}));
  CloseWatch(2);
  CloseWatch(1);
  EXPECT_EQ(registry_->CheckLeases(), 0);
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_EQ(registry_->CheckLeases(), 0);
  ReopenWatch(1);
  clock_.Advance(absl::Milliseconds(1400));
  EXPECT_EQ(registry_->CheckLeases(), 0);
  clock_.Advance(absl::Milliseconds(200));
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(StateOf("w2"), v1::WORKER_LOST);
  EXPECT_EQ(StateOf("w1"), v1::WORKER_ACTIVE);
  EXPECT_EQ(StateOf("w0"), v1::WORKER_ACTIVE);
}

// A suspicion renewed away is over, watch or not.
TEST_F(PeerFailureTest, ARenewedSuspectIsNoLongerSuspected) {
  ASSERT_NO_FATAL_FAILURE(Start({"h0", "h1", "h2"}));
  ASSERT_TRUE(registry_->Heartbeat(FailureReport(id_, "w0", 1, {"gpu1"})).ok());
  CloseWatch(1);
  ASSERT_TRUE(registry_->Heartbeat(id_, "w1").ok());
  EXPECT_EQ(registry_->CheckLeases(), 0);
  EXPECT_EQ(StateOf("w1"), v1::WORKER_ACTIVE);
}

}  // namespace
}  // namespace pipeplan::server
