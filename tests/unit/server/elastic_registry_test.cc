// The registry's side of elastic jobs (issue 10): worker identity, the job
// lifecycle, reports stored once, storage faults with the right codes and
// nothing lost, and the store-write health signal.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fault_injecting_store.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/store/write_health_store.h"
#include "test_util.h"

namespace pipeplan::server {
namespace {

// Reads here are bounded by count; the byte bound does not bind.
constexpr int64_t kAnyBytes = int64_t{1} << 40;

using testing::FaultInjectingStore;

v1::Plan PlanOn(std::vector<std::string> devices) {
  v1::Plan p;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto* s = p.add_stages();
    s->set_index(static_cast<int>(i));
    s->set_device_id(devices[i]);
  }
  return p;
}

v1::WorkerInfo Worker(const std::string& id, const std::string& device,
                      const std::string& run = "run-a") {
  v1::WorkerInfo w;
  w.set_worker_id(id);
  w.set_device_id(device);
  w.set_run_id(run);
  return w;
}

v1::ReportStepRequest Report(const std::string& job, const std::string& worker, int64_t step,
                             const std::string& run, int64_t seq) {
  v1::ReportStepRequest r;
  r.set_job_id(job);
  r.set_worker_id(worker);
  r.set_step(step);
  r.set_plan_version(1);
  r.set_run_id(run);
  r.set_seq(seq);
  return r;
}

v1::FinishWorkerRequest Finish(const std::string& job, const std::string& worker) {
  v1::FinishWorkerRequest f;
  f.set_job_id(job);
  f.set_worker_id(worker);
  f.set_step(3);
  return f;
}

class ElasticRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogEnabled(false);
    registry_ = std::make_unique<JobRegistry>(&store_, &clock_,
                                              JobRegistry::Options{.lease = absl::Seconds(10)});
    auto job = registry_->CreateJob("j", testing::SmallRequest(), PlanOn({"gpu0", "gpu1"}));
    ASSERT_TRUE(job.ok()) << job.status();
    id_ = job->id();
  }
  void TearDown() override { SetLogEnabled(true); }

  FakeClock clock_;
  FaultInjectingStore store_;
  std::unique_ptr<JobRegistry> registry_;
  std::string id_;
};

TEST_F(ElasticRegistryTest, AWorkerIdIsBoundToItsDevice) {
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w0", "gpu0")).ok());
  auto dup = registry_->RegisterWorker(id_, Worker("w0", "gpu1", "run-b"));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("on device gpu0, not gpu1"), std::string::npos)
      << dup.status();
  EXPECT_EQ(registry_->GetJob(id_)->workers(0).info().device_id(), "gpu0");  // untouched
  // A restart on the same device is a reconnect.
  auto again = registry_->RegisterWorker(id_, Worker("w0", "gpu0", "run-b"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rank(), 0);
  // Once its lease ran out the id may move (a replaced host).
  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(registry_->CheckLeases(), 1);
  EXPECT_TRUE(registry_->RegisterWorker(id_, Worker("w0", "gpu1", "run-c")).ok());
}

// A worker that leaves (SIGTERM) is LEFT: no lease, never lost, the job goes
// on (neither completed nor failed), and it is active again when it comes
// back.
TEST_F(ElasticRegistryTest, AWorkerThatLeavesIsLeftNotLostAndTheJobGoesOn) {
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w0", "gpu0")).ok());
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w1", "gpu1")).ok());
  ASSERT_TRUE(registry_->ReportStep(Report(id_, "w0", 0, "run-a", 1)).ok());
  v1::FinishWorkerRequest leave = Finish(id_, "w1");
  leave.set_leaving(true);
  auto job = registry_->FinishWorker(leave);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_RUNNING);
  EXPECT_EQ(job->workers(1).state(), v1::WORKER_LEFT);
  clock_.Advance(absl::Seconds(11));
  EXPECT_EQ(registry_->CheckLeases(), 1);  // w0, which stopped heartbeating here
  EXPECT_EQ(registry_->GetJob(id_)->workers(1).state(), v1::WORKER_LEFT);
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w1", "gpu1", "run-b")).ok());
  EXPECT_EQ(registry_->GetJob(id_)->workers(1).state(), v1::WORKER_ACTIVE);
  // Every worker leaving (the whole host stopped) does not end the job.
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w0", "gpu0", "run-b")).ok());
  for (const char* w : {"w0", "w1"}) {
    v1::FinishWorkerRequest all = Finish(id_, w);
    all.set_leaving(true);
    all.set_whole_job(true);
    ASSERT_TRUE(registry_->FinishWorker(all).ok());
  }
  EXPECT_EQ(registry_->GetJob(id_)->state(), v1::JOB_RUNNING);
  EXPECT_EQ(registry_->counts().lost_workers, 0);
}

// A version published as training reached max_steps never ran: the job
// completes when the ranks of the version that trained to the end finished,
// though a worker that has a rank only in the new version never will.
TEST_F(ElasticRegistryTest, TheVersionThatTrainedToTheEndCompletesTheJob) {
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w0", "gpu0")).ok());
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w1", "gpu1")).ok());
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w2", "gpu2")).ok());
  ASSERT_TRUE(registry_->ReportStep(Report(id_, "w0", 0, "run-a", 1)).ok());
  ASSERT_TRUE(
      registry_
          ->PublishPlan(id_, testing::SmallRequest(), PlanOn({"gpu0", "gpu1", "gpu2"}), "joined")
          .ok());
  v1::FinishWorkerRequest f0 = Finish(id_, "w0");
  f0.set_plan_version(1);
  ASSERT_TRUE(registry_->FinishWorker(f0).ok());
  EXPECT_EQ(registry_->GetJob(id_)->state(), v1::JOB_RUNNING);  // w1 still trains
  v1::FinishWorkerRequest f1 = Finish(id_, "w1");
  f1.set_plan_version(1);
  auto done = registry_->FinishWorker(f1);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), v1::JOB_COMPLETED);
  // w2 hears it with its heartbeat, and finishes too.
  auto hb = registry_->Heartbeat(id_, "w2");
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->job_state(), v1::JOB_COMPLETED);
  EXPECT_EQ(registry_->FinishWorker(Finish(id_, "w2"))->state(), v1::JOB_COMPLETED);
}

TEST_F(ElasticRegistryTest, PendingRunningCompletedAndNobodyLost) {
  EXPECT_EQ(registry_->GetJob(id_)->state(), v1::JOB_PENDING);
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w0", "gpu0")).ok());
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w1", "gpu1")).ok());
  EXPECT_EQ(registry_->GetJob(id_)->state(), v1::JOB_PENDING);
  ASSERT_TRUE(registry_->ReportStep(Report(id_, "w0", 0, "run-a", 1)).ok());
  EXPECT_EQ(registry_->GetJob(id_)->state(), v1::JOB_RUNNING);
  ASSERT_TRUE(registry_->FinishWorker(Finish(id_, "w0")).ok());
  auto done = registry_->FinishWorker(Finish(id_, "w1"));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), v1::JOB_COMPLETED);
  clock_.Advance(absl::Minutes(5));
  EXPECT_EQ(registry_->CheckLeases(), 0);
  EXPECT_EQ(registry_->counts().lost_workers, 0);
  // The state survives a restart.
  JobRegistry recovered(&store_, &clock_, {.lease = absl::Seconds(10)});
  ASSERT_TRUE(recovered.Recover().ok());
  EXPECT_EQ(recovered.GetJob(id_)->state(), v1::JOB_COMPLETED);
}

TEST_F(ElasticRegistryTest, AResentReportIsStoredOnceAcrossARestart) {
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w0", "gpu0")).ok());
  for (int seq = 1; seq <= 3; ++seq) {
    ASSERT_TRUE(registry_->ReportStep(Report(id_, "w0", seq - 1, "run-a", seq)).ok());
  }
  // The answer to seq 3 was lost: the worker sends it again.
  ASSERT_TRUE(registry_->ReportStep(Report(id_, "w0", 2, "run-a", 3)).ok());
  EXPECT_EQ(registry_->RecentStepReports(id_, 100, kAnyBytes)->size(), 3u);
  JobRegistry recovered(&store_, &clock_, {.lease = absl::Seconds(10)});
  ASSERT_TRUE(recovered.Recover().ok());
  ASSERT_TRUE(recovered.ReportStep(Report(id_, "w0", 2, "run-a", 3)).ok());
  ASSERT_TRUE(recovered.ReportStep(Report(id_, "w0", 3, "run-a", 4)).ok());
  // A new run of the worker numbers from 1 again.
  ASSERT_TRUE(recovered.ReportStep(Report(id_, "w0", 0, "run-b", 1)).ok());
  EXPECT_EQ(recovered.RecentStepReports(id_, 100, kAnyBytes)->size(), 5u);
}

TEST_F(ElasticRegistryTest, StorageFaultsHaveRetryableCodesAndLoseNothing) {
  ASSERT_TRUE(registry_->RegisterWorker(id_, Worker("w0", "gpu0")).ok());
  ASSERT_TRUE(registry_->ReportStep(Report(id_, "w0", 0, "run-a", 1)).ok());
  int seq = 2;
  for (const auto& [error, code] :
       std::vector<std::pair<int, absl::StatusCode>>{{ENOSPC, absl::StatusCode::kResourceExhausted},
                                                     {EIO, absl::StatusCode::kUnavailable},
                                                     {EROFS, absl::StatusCode::kUnavailable}}) {
    store_.inject(error);
    auto refused = registry_->ReportStep(Report(id_, "w0", seq - 1, "run-a", seq));
    EXPECT_EQ(refused.status().code(), code) << std::strerror(error);
    EXPECT_EQ(registry_->RegisterWorker(id_, Worker("w1", "gpu1")).status().code(), code);
    // Reads still answer; the refused report left nothing behind.
    ASSERT_TRUE(registry_->GetJob(id_).ok());
    ASSERT_TRUE(registry_->GetPlan(id_, 1).ok());
    EXPECT_EQ(registry_->RecentStepReports(id_, 100, kAnyBytes)->size(),
              static_cast<size_t>(seq - 1));
    // The fault clears: the worker's retry is stored.
    store_.inject(0);
    ASSERT_TRUE(registry_->ReportStep(Report(id_, "w0", seq - 1, "run-a", seq)).ok());
    ++seq;
  }
  EXPECT_EQ(registry_->RecentStepReports(id_, 100, kAnyBytes)->size(), 4u);
  EXPECT_EQ(registry_->GetJob(id_)->workers(0).last_step(), 3);
}

TEST(WriteHealthStoreTest, ReportsWhenWritesFailAndWhenTheyWorkAgain) {
  auto faulty = std::make_unique<FaultInjectingStore>();
  FaultInjectingStore* fault = faulty.get();
  std::vector<bool> changes;
  std::unique_ptr<Store> store =
      WithWriteHealth(std::move(faulty), [&](bool writing) { changes.push_back(writing); });
  JobRecord job{.id = "j1", .current_version = 1};
  v1::VersionedPlan first;
  first.set_job_id("j1");
  first.set_version(1);
  ASSERT_TRUE(store->CreateJob(job, first).ok());
  // Not a disk fault: the state stays.
  EXPECT_EQ(store->CreateJob(job, first).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(changes.empty());
  fault->inject(ENOSPC);
  v1::ReportStepRequest r;
  r.set_job_id("j1");
  EXPECT_EQ(store->AppendStepReport(r).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store->AppendStepReport(r).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store->GetPlan("j1", 1).ok());  // reads still work
  fault->inject(0);
  EXPECT_TRUE(store->AppendStepReport(r).ok());
  EXPECT_EQ(changes, (std::vector<bool>{false, true}));
}

// The real thing: SQLite on a small tmpfs that fills up (root only).
TEST(SqliteStoreFaultTest, AFullDiskIsResourceExhaustedAndLosesNothing) {
  testing::TempDir dir;
  const std::string mnt = dir.path() + "/mnt";
  ASSERT_EQ(mkdir(mnt.c_str(), 0700), 0);
  if (geteuid() != 0 || mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=2m") != 0) {
    GTEST_SKIP() << "needs root to mount a tmpfs";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  auto store = OpenSqliteStore(mnt + "/data");
  ASSERT_TRUE(store.ok()) << store.status();
  JobRecord job{.id = "j1", .current_version = 1};
  v1::VersionedPlan first;
  first.set_job_id("j1");
  first.set_version(1);
  ASSERT_TRUE((*store)->CreateJob(job, first).ok());
  v1::ReportStepRequest r;
  r.set_job_id("j1");
  r.set_worker_id("w0");
  r.mutable_timings()->Reserve(64);
  for (int i = 0; i < 64; ++i) r.add_timings()->set_action(std::string(200, 'x'));
  int stored = 0;
  absl::Status s;
  {
    // Fill the rest of the file system, leaving the database no room.
    std::ofstream filler(mnt + "/filler", std::ios::binary);
    const std::string block(64 << 10, '\0');
    while (filler.write(block.data(), block.size())) {
    }
  }
  for (int i = 0; i < 2'000 && s.ok(); ++i) {
    r.set_step(stored);
    s = (*store)->AppendStepReport(r);
    if (s.ok()) ++stored;
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE((*store)->GetPlan("j1", 1).ok());
  ASSERT_EQ(unlink((mnt + "/filler").c_str()), 0);
  r.set_step(stored);
  ASSERT_TRUE((*store)->AppendStepReport(r).ok());
  ++stored;
  auto reports = (*store)->RecentStepReports("j1", 10'000, kAnyBytes);
  ASSERT_TRUE(reports.ok());
  EXPECT_EQ(static_cast<int>(reports->size()), stored);
}

}  // namespace
}  // namespace pipeplan::server
