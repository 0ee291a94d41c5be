#include "pipeplan/server/jobs/job_registry.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "pipeplan/server/obs/log.h"
#include "test_util.h"

namespace pipeplan::server {
namespace {

class RecordingWatcher : public PlanWatcher {
 public:
  void OnPlan(std::shared_ptr<const v1::PlanUpdate> update) override { updates.push_back(*update); }
  void OnClose(const absl::Status& status) override { closed = status; }
  std::vector<v1::PlanUpdate> updates;
  std::optional<absl::Status> closed;
};

v1::Plan PlanOn(std::vector<std::string> devices, const std::string& tag) {
  v1::Plan p;
  p.set_graph_name(tag);
  for (size_t i = 0; i < devices.size(); ++i) {
    auto* s = p.add_stages();
    s->set_index(static_cast<int>(i));
    s->set_device_id(devices[i]);
  }
  return p;
}

v1::WorkerInfo Worker(const std::string& id, const std::string& device) {
  v1::WorkerInfo w;
  w.set_worker_id(id);
  w.set_device_id(device);
  w.set_host("host0");
  w.set_memory_bytes(80e9);
  return w;
}

// The in-memory store with a switch that makes every write fail, as a full
// disk or a lost database connection would (reads keep working).
class FailingWritesStore : public Store {
 public:
  bool fail = false;

  absl::Status CreateJob(const JobRecord& job, const v1::VersionedPlan& first) override {
    return fail ? Unavailable() : store_->CreateJob(job, first);
  }
  absl::Status AppendPlan(const v1::VersionedPlan& plan) override {
    return fail ? Unavailable() : store_->AppendPlan(plan);
  }
  absl::Status DeleteJob(const std::string& job_id) override {
    return fail ? Unavailable() : store_->DeleteJob(job_id);
  }
  absl::Status SetJobState(const std::string& job_id, v1::JobState state,
                           const std::string& message) override {
    return fail ? Unavailable() : store_->SetJobState(job_id, state, message);
  }
  absl::StatusOr<v1::VersionedPlan> GetPlan(const std::string& job_id, int64_t version) override {
    return store_->GetPlan(job_id, version);
  }
  absl::Status PutWorker(const WorkerRecord& worker) override {
    return fail ? Unavailable() : store_->PutWorker(worker);
  }
  absl::Status AppendStepReport(const v1::ReportStepRequest& report) override {
    return fail ? Unavailable() : store_->AppendStepReport(report);
  }
  absl::StatusOr<std::vector<v1::ReportStepRequest>> RecentStepReports(const std::string& job_id,
                                                                       int limit,
                                                                       int64_t max_bytes) override {
    return store_->RecentStepReports(job_id, limit, max_bytes);
  }
  absl::StatusOr<std::vector<StoredJob>> Load() override { return store_->Load(); }

 private:
  static absl::Status Unavailable() { return absl::UnavailableError("store is down"); }
  std::unique_ptr<Store> store_ = NewMemoryStore();
};

class JobRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogEnabled(false);
    store_ = NewMemoryStore();
    registry_ = std::make_unique<JobRegistry>(store_.get(), &clock_,
                                              JobRegistry::Options{.lease = absl::Seconds(10)});
    request_ = testing::SmallRequest();
  }
  void TearDown() override { SetLogEnabled(true); }
  std::string NewJob() {
    auto job = registry_->CreateJob("train", request_, PlanOn({"gpu0", "gpu1"}, "v1"));
    EXPECT_TRUE(job.ok()) << job.status();
    return job->id();
  }
  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<JobRegistry> registry_;
  v1::PlanRequest request_;
};

TEST_F(JobRegistryTest, CreateGetListDelete) {
  const std::string id = NewJob();
  auto job = registry_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->plan_version(), 1);
  EXPECT_EQ(job->plan().graph_name(), "v1");
  EXPECT_EQ(job->name(), "train");
  EXPECT_EQ(registry_->ListJobs().size(), 1u);
  EXPECT_EQ(registry_->GetJob("job-nope").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry_->DeleteJob(id).ok());
  EXPECT_EQ(registry_->GetJob(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->DeleteJob(id).code(), absl::StatusCode::kNotFound);
}

TEST_F(JobRegistryTest, PublishBumpsVersionKeepsHistoryAndNotifiesWatchers) {
  const std::string id = NewJob();
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("w1", "gpu1")).ok());
  auto watcher = std::make_shared<RecordingWatcher>();
  ASSERT_TRUE(registry_->Watch(id, "w1", 0, watcher).ok());
  ASSERT_EQ(watcher->updates.size(), 1u);  // the current version at once
  EXPECT_EQ(watcher->updates[0].version(), 1);
  EXPECT_EQ(watcher->updates[0].rank(), 1);

  auto v2 = registry_->PublishPlan(id, request_, PlanOn({"gpu1", "gpu0"}, "v2"), "test");
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(*v2, 2);
  ASSERT_EQ(watcher->updates.size(), 2u);
  EXPECT_EQ(watcher->updates[1].version(), 2);
  EXPECT_EQ(watcher->updates[1].rank(), 0);  // gpu1 moved to rank 0

  EXPECT_EQ(registry_->GetPlan(id, 1)->plan().graph_name(), "v1");
  EXPECT_EQ(registry_->GetPlan(id, 0)->plan().graph_name(), "v2");
  EXPECT_EQ(registry_->GetPlan(id, 2)->reason(), "test");
  EXPECT_EQ(registry_->GetPlan(id, 3).status().code(), absl::StatusCode::kNotFound);

  // A watcher that already knows version 2 gets nothing at once.
  auto late = std::make_shared<RecordingWatcher>();
  ASSERT_TRUE(registry_->Watch(id, "w1", 2, late).ok());
  EXPECT_TRUE(late->updates.empty());

  ASSERT_TRUE(registry_->DeleteJob(id).ok());
  ASSERT_TRUE(watcher->closed.has_value());
  EXPECT_EQ(watcher->closed->code(), absl::StatusCode::kNotFound);
}

TEST_F(JobRegistryTest, ExpiredWatchersAreDropped) {
  const std::string id = NewJob();
  {
    auto gone = std::make_shared<RecordingWatcher>();
    ASSERT_TRUE(registry_->Watch(id, "", 0, gone).ok());
  }
  EXPECT_EQ(registry_->counts().watchers, 0);
  EXPECT_TRUE(registry_->PublishPlan(id, request_, PlanOn({"gpu0"}, "v2"), "x").ok());
}

TEST_F(JobRegistryTest, WorkerValidation) {
  const std::string id = NewJob();
  EXPECT_EQ(registry_->RegisterWorker(id, Worker("", "gpu0")).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto bad = registry_->RegisterWorker(id, Worker("w", "tpu9"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("worker.device_id \"tpu9\""), std::string::npos);
  EXPECT_EQ(registry_->RegisterWorker("job-x", Worker("w", "gpu0")).status().code(),
            absl::StatusCode::kNotFound);
  auto a = registry_->RegisterWorker(id, Worker("w", "gpu5"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->rank(), -1);  // gpu5 has no stage in this plan
  EXPECT_DOUBLE_EQ(a->lease_seconds(), 10);
}

TEST_F(JobRegistryTest, LeasesExpireAndHeartbeatsRevive) {
  const std::string id = NewJob();
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("w1", "gpu0")).ok());
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("w2", "gpu1")).ok());
  clock_.Advance(absl::Seconds(6));
  ASSERT_TRUE(registry_->Heartbeat(id, "w1").ok());
  EXPECT_EQ(registry_->CheckLeases(), 0);
  clock_.Advance(absl::Seconds(5));  // w2 at 11 s, w1 at 5 s since heartbeat
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_EQ(registry_->counts().lost_workers, 1);
  EXPECT_EQ(registry_->counts().active_workers, 1);
  auto job = registry_->GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->workers(1).info().worker_id(), "w2");
  EXPECT_EQ(job->workers(1).state(), v1::WORKER_LOST);
  EXPECT_EQ(registry_->CheckLeases(), 0);  // counted once
  ASSERT_TRUE(registry_->Heartbeat(id, "w2").ok());
  EXPECT_EQ(registry_->counts().lost_workers, 0);
  EXPECT_EQ(registry_->Heartbeat(id, "w9").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry_->Heartbeat("job-nope", "w2").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobRegistryTest, StepReports) {
  const std::string id = NewJob();
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("w1", "gpu0")).ok());
  v1::ReportStepRequest r;
  r.set_job_id(id);
  r.set_worker_id("w1");
  r.set_step(7);
  r.set_plan_version(1);
  r.add_timings()->set_action("0F0");
  ASSERT_TRUE(registry_->ReportStep(r).ok());
  ASSERT_TRUE(registry_->PublishPlan(id, request_, PlanOn({"gpu0"}, "v2"), "x").ok());
  // The last step of version 1 is kept; the answer says to switch.
  r.set_step(8);
  auto stale = registry_->ReportStep(r);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ(stale->current_plan_version(), 2);
  r.set_plan_version(3);
  auto future = registry_->ReportStep(r);
  EXPECT_EQ(future.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(future.status().message().find("is at version 2"), std::string::npos);
  r.set_plan_version(2);
  r.set_step(8);
  auto ok = registry_->ReportStep(r);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->current_plan_version(), 2);
  r.set_worker_id("ghost");
  EXPECT_EQ(registry_->ReportStep(r).status().code(), absl::StatusCode::kFailedPrecondition);
  r.set_job_id("job-nope");
  EXPECT_EQ(registry_->ReportStep(r).status().code(), absl::StatusCode::kNotFound);
  r.set_job_id(id);
  auto recent = registry_->RecentStepReports(id, 10, int64_t{1} << 30);
  ASSERT_TRUE(recent.ok());
  ASSERT_EQ(recent->size(), 3u);  // 7 and 8 of version 1, 8 of version 2
  EXPECT_EQ((*recent)[0].step(), 8);
  EXPECT_EQ((*recent)[0].plan_version(), 2);
  EXPECT_EQ(registry_->GetJob(id)->workers(0).last_step(), 8);
}

TEST_F(JobRegistryTest, RecoverRestoresJobsWorkersAndRestartsLeases) {
  const std::string id = NewJob();
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("w1", "gpu1")).ok());
  ASSERT_TRUE(registry_->PublishPlan(id, request_, PlanOn({"gpu1"}, "v2"), "x").ok());
  clock_.Advance(absl::Hours(1));  // the planner was down for an hour
  JobRegistry recovered(store_.get(), &clock_, {.lease = absl::Seconds(10)});
  ASSERT_TRUE(recovered.Recover().ok());
  auto job = recovered.GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->plan_version(), 2);
  EXPECT_EQ(job->plan().graph_name(), "v2");
  ASSERT_EQ(job->workers_size(), 1);
  EXPECT_EQ(recovered.CheckLeases(), 0);  // fresh lease after recovery
  EXPECT_TRUE(recovered.Heartbeat(id, "w1").ok());
  EXPECT_EQ(recovered.GetPlan(id, 1)->plan().graph_name(), "v1");
}

v1::FinishWorkerRequest Finish(const std::string& job, const std::string& worker, int64_t step,
                               const std::string& error = "") {
  v1::FinishWorkerRequest r;
  r.set_job_id(job);
  r.set_worker_id(worker);
  r.set_step(step);
  r.set_error(error);
  return r;
}

TEST_F(JobRegistryTest, JobSucceedsWhenEveryRankIsDoneAndDoneWorkersHoldNoLease) {
  const std::string id = NewJob();
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("w1", "gpu0")).ok());
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("w2", "gpu1")).ok());
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("idle", "gpu5")).ok());  // no rank
  auto job = registry_->FinishWorker(Finish(id, "w1", 10));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_PENDING);  // w2 still trains; no step reported yet
  EXPECT_EQ(job->workers(1).state(), v1::WORKER_DONE);
  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(registry_->CheckLeases(), 2);  // w2 and idle, not the done w1
  job = registry_->FinishWorker(Finish(id, "w2", 10));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_COMPLETED);
  EXPECT_TRUE(job->failure_message().empty());
  EXPECT_EQ(registry_->FinishWorker(Finish(id, "ghost", 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry_->FinishWorker(Finish("job-x", "w1", 1)).status().code(),
            absl::StatusCode::kNotFound);
  // Found by the worker_rpc fuzzer: step - 1 overflowed.
  EXPECT_EQ(registry_->FinishWorker(Finish(id, "w1", std::numeric_limits<int64_t>::min()))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(JobRegistryTest, WorkerErrorFailsTheJobAndSurvivesRecovery) {
  v1::TrainingSpec training;
  training.set_model_package("/pkg");
  auto created = registry_->CreateJob("t", request_, PlanOn({"gpu0", "gpu1"}, "v1"), training);
  ASSERT_TRUE(created.ok());
  const std::string id = created->id();
  EXPECT_EQ(created->training().model_package(), "/pkg");
  EXPECT_EQ(created->state(), v1::JOB_PENDING);
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("w1", "gpu0")).ok());
  auto job = registry_->FinishWorker(Finish(id, "w1", 7, "loss is nan at step 7"));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_FAILED);
  EXPECT_EQ(job->failure_message(), "worker w1 at step 7: loss is nan at step 7");
  // The first failure is the one reported; a later success does not hide it.
  ASSERT_TRUE(registry_->RegisterWorker(id, Worker("w2", "gpu1")).ok());
  ASSERT_TRUE(registry_->FinishWorker(Finish(id, "w2", 9)).ok());
  JobRegistry recovered(store_.get(), &clock_, JobRegistry::Options{});
  ASSERT_TRUE(recovered.Recover().ok());
  auto again = recovered.GetJob(id);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state(), v1::JOB_FAILED);
  EXPECT_EQ(again->failure_message(), "worker w1 at step 7: loss is nan at step 7");
  EXPECT_EQ(again->training().model_package(), "/pkg");
}

// Store first, then memory: a write the store refuses changes nothing the
// registry reports, and a registry recovered from the store sees the same.
TEST(JobRegistryStoreFirst, AFailingStoreLeavesMemoryUnchanged) {
  SetLogEnabled(false);
  FailingWritesStore store;
  FakeClock clock;
  JobRegistry registry(&store, &clock, {.lease = absl::Seconds(10)});
  const v1::PlanRequest request = testing::SmallRequest();
  store.fail = true;
  EXPECT_EQ(registry.CreateJob("j", request, PlanOn({"gpu0"}, "v1")).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(registry.ListJobs().empty());

  store.fail = false;
  auto job = registry.CreateJob("j", request, PlanOn({"gpu0", "gpu1"}, "v1"));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  ASSERT_TRUE(registry.RegisterWorker(id, Worker("w0", "gpu0")).ok());
  auto watcher = std::make_shared<RecordingWatcher>();
  ASSERT_TRUE(registry.Watch(id, "w0", 1, watcher).ok());

  store.fail = true;
  EXPECT_FALSE(registry.PublishPlan(id, request, PlanOn({"gpu1"}, "v2"), "x").ok());
  EXPECT_FALSE(registry.RegisterWorker(id, Worker("w1", "gpu1")).ok());
  v1::ReportStepRequest report;
  report.set_job_id(id);
  report.set_worker_id("w0");
  report.set_plan_version(1);
  report.set_step(3);
  EXPECT_FALSE(registry.ReportStep(report).ok());
  EXPECT_FALSE(registry.DeleteJob(id).ok());
  clock.Advance(absl::Seconds(11));
  EXPECT_EQ(registry.CheckLeases(), 0);  // cannot record the loss: w0 stays active
  auto seen = registry.GetJob(id);
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->plan_version(), 1);
  EXPECT_EQ(seen->plan().graph_name(), "v1");
  ASSERT_EQ(seen->workers_size(), 1);
  EXPECT_EQ(seen->workers(0).state(), v1::WORKER_ACTIVE);
  EXPECT_EQ(seen->workers(0).last_step(), -1);
  EXPECT_TRUE(watcher->updates.empty());

  // The store is back: the loss is recorded; a heartbeat the store refuses
  // does not revive the worker.
  store.fail = false;
  EXPECT_EQ(registry.CheckLeases(), 1);
  store.fail = true;
  EXPECT_EQ(registry.Heartbeat(id, "w0").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(registry.ReportStep(report).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(registry.GetJob(id)->workers(0).state(), v1::WORKER_LOST);
  EXPECT_EQ(registry.counts().lost_workers, 1);

  store.fail = false;
  JobRegistry recovered(&store, &clock, {.lease = absl::Seconds(10)});
  ASSERT_TRUE(recovered.Recover().ok());
  auto restored = recovered.GetJob(id);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->plan_version(), 1);
  ASSERT_EQ(restored->workers_size(), 1);
  EXPECT_EQ(restored->workers(0).state(), v1::WORKER_LOST);
  EXPECT_EQ(restored->workers(0).last_step(), -1);
  SetLogEnabled(true);
}

}  // namespace
}  // namespace pipeplan::server
