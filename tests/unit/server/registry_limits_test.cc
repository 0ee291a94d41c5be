// The job registry's per-object limits (issue 14): rendezvous value size,
// keys and bytes per job, bytes of all jobs, step report size and timings.
// Each is tested just below (accepted) and just above (RESOURCE_EXHAUSTED
// naming the flag and its value), and rendezvous memory comes back when a
// job is deleted or cancelled or its old plan versions are superseded.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/obs/log.h"
#include "test_util.h"

namespace pipeplan::server {
namespace {

v1::Plan OneStagePlan() {
  v1::Plan p;
  p.add_stages()->set_device_id("gpu0");
  return p;
}

class RegistryLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override { SetLogEnabled(false); }
  void TearDown() override { SetLogEnabled(true); }

  void Make(JobRegistry::Options o) {
    registry_ = std::make_unique<JobRegistry>(store_.get(), &clock_, o);
  }
  std::string NewJob() {
    auto job = registry_->CreateJob("j", testing::SmallRequest(), OneStagePlan());
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }
  int64_t Held() const { return registry_->counts().rendezvous_bytes; }

  FakeClock clock_;
  std::unique_ptr<Store> store_ = NewMemoryStore();
  std::unique_ptr<JobRegistry> registry_;
};

// RESOURCE_EXHAUSTED whose message names `limit` (e.g. "--max-report-bytes=100").
void ExpectOver(const absl::Status& s, const std::string& limit) {
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("over the limit " + limit), std::string::npos) << s;
}

TEST_F(RegistryLimitsTest, RendezvousValueSize) {
  Make({.rendezvous_max_value_bytes = 100});
  const std::string job = NewJob();
  EXPECT_TRUE(registry_->RendezvousSet(job, "k", std::string(100, 'x')).ok());
  ExpectOver(registry_->RendezvousSet(job, "k", std::string(101, 'x')),
             "--rendezvous-max-value-bytes=100");
  // The refused value did not replace the stored one.
  EXPECT_EQ(registry_->RendezvousGet(job, "k")->value().size(), 100u);
  // Keys are a protocol rule, not a limit.
  EXPECT_EQ(registry_->RendezvousSet(job, std::string(257, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RegistryLimitsTest, RendezvousKeysPerJob) {
  Make({.rendezvous_max_keys_per_job = 3});
  const std::string job = NewJob();
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(registry_->RendezvousSet(job, "k" + std::to_string(i), "v").ok());
  ExpectOver(registry_->RendezvousSet(job, "k3", "v"), "--rendezvous-max-keys-per-job=3");
  // Overwriting a key adds none.
  EXPECT_TRUE(registry_->RendezvousSet(job, "k0", "w").ok());
  // The limit is per job.
  EXPECT_TRUE(registry_->RendezvousSet(NewJob(), "k3", "v").ok());
}

TEST_F(RegistryLimitsTest, RendezvousBytesPerJobCountKeysAndValues) {
  Make({.rendezvous_max_bytes_per_job = 100});
  const std::string job = NewJob();
  ASSERT_TRUE(registry_->RendezvousSet(job, "a", std::string(49, 'x')).ok());  // 50
  ASSERT_TRUE(registry_->RendezvousSet(job, "b", std::string(49, 'x')).ok());  // 100
  EXPECT_EQ(Held(), 100);
  ExpectOver(registry_->RendezvousSet(job, "c", ""), "--rendezvous-max-bytes-per-job=100");
  // A shorter value frees room; a longer one past the limit is refused.
  ASSERT_TRUE(registry_->RendezvousSet(job, "a", std::string(9, 'x')).ok());  // 60
  EXPECT_EQ(Held(), 60);
  EXPECT_TRUE(registry_->RendezvousSet(job, "c", std::string(39, 'x')).ok());  // 100
  ExpectOver(registry_->RendezvousSet(job, "a", std::string(10, 'x')),
             "--rendezvous-max-bytes-per-job=100");
}

TEST_F(RegistryLimitsTest, RendezvousBytesOfAllJobs) {
  Make({.rendezvous_max_bytes_per_job = 1000, .rendezvous_max_bytes = 150});
  const std::string a = NewJob(), b = NewJob();
  ASSERT_TRUE(registry_->RendezvousSet(a, "k", std::string(99, 'x')).ok());  // 100
  ASSERT_TRUE(registry_->RendezvousSet(b, "k", std::string(49, 'x')).ok());  // 150
  ExpectOver(registry_->RendezvousSet(b, "l", ""), "--rendezvous-max-bytes=150");
  // Deleting a job gives its bytes back to everyone.
  ASSERT_TRUE(registry_->DeleteJob(a).ok());
  EXPECT_EQ(Held(), 50);
  EXPECT_TRUE(registry_->RendezvousSet(b, "l", std::string(98, 'x')).ok());  // 150
}

TEST_F(RegistryLimitsTest, DeletingAJobFreesItsRendezvousMemory) {
  Make({.rendezvous_max_value_bytes = 1 << 20});
  const std::string job = NewJob();
  const std::string value(1 << 20, 'v');
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(registry_->RendezvousSet(job, "key" + std::to_string(i), value).ok());
  }
  EXPECT_GT(Held(), 16 << 20);
  ASSERT_TRUE(registry_->DeleteJob(job).ok());
  EXPECT_EQ(Held(), 0);
  EXPECT_EQ(registry_->RendezvousGet(job, "key0").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryLimitsTest, CancellingAJobFreesItsRendezvousBytes) {
  Make({.rendezvous_max_bytes = 150});
  const std::string a = NewJob(), b = NewJob();
  ASSERT_TRUE(registry_->RendezvousSet(a, "k", std::string(99, 'x')).ok());  // 100
  ASSERT_TRUE(registry_->RendezvousSet(b, "k", std::string(49, 'x')).ok());  // 150
  ASSERT_TRUE(registry_->CancelJob(a, "test").ok());
  // The cancelled job keeps its record but no longer its rendezvous bytes.
  EXPECT_EQ(Held(), 50);
  EXPECT_TRUE(registry_->RendezvousSet(b, "l", std::string(99, 'x')).ok());  // 150
  ASSERT_TRUE(registry_->DeleteJob(a).ok());
  EXPECT_EQ(Held(), 150);
}

TEST_F(RegistryLimitsTest, PublishingDropsKeysOfVersionsBeforeThePreviousOne) {
  Make({});
  const std::string job = NewJob();
  for (const char* key : {"v1/gloo/0", "v2/gloo/0", "v3/gloo/0", "free-form", "v/x", "vx/y"}) {
    ASSERT_TRUE(registry_->RendezvousSet(job, key, "addr").ok());
  }
  const int64_t before = Held();
  ASSERT_TRUE(registry_->PublishPlan(job, testing::SmallRequest(), OneStagePlan(), "r").ok());
  ASSERT_TRUE(registry_->PublishPlan(job, testing::SmallRequest(), OneStagePlan(), "r").ok());
  // Version 3 is current: v1 goes, v2 (the previous) and v3 stay, and keys
  // without a version prefix are never touched.
  EXPECT_FALSE(registry_->RendezvousGet(job, "v1/gloo/0")->found());
  for (const char* key : {"v2/gloo/0", "v3/gloo/0", "free-form", "v/x", "vx/y"}) {
    EXPECT_TRUE(registry_->RendezvousGet(job, key)->found()) << key;
  }
  EXPECT_EQ(Held(), before - static_cast<int64_t>(std::string("v1/gloo/0addr").size()));
}

class ReportLimitsTest : public RegistryLimitsTest {
 protected:
  v1::ReportStepRequest Report(const std::string& job, int timings, size_t action_bytes) {
    v1::ReportStepRequest r;
    r.set_job_id(job);
    r.set_worker_id("w0");
    r.set_plan_version(1);
    for (int i = 0; i < timings; ++i) {
      v1::ActionTiming* t = r.add_timings();
      t->set_action(std::string(action_bytes, 'F'));
      t->set_seconds(0.001);
    }
    return r;
  }
  std::string JobWithWorker() {
    const std::string job = NewJob();
    v1::WorkerInfo w;
    w.set_worker_id("w0");
    w.set_device_id("gpu0");
    EXPECT_TRUE(registry_->RegisterWorker(job, w).ok());
    return job;
  }
};

TEST_F(ReportLimitsTest, TimingsPerReport) {
  Make({.max_report_timings = 10});
  const std::string job = JobWithWorker();
  EXPECT_TRUE(registry_->ReportStep(Report(job, 10, 3)).ok());
  ExpectOver(registry_->ReportStep(Report(job, 11, 3)).status(), "--max-report-timings=10");
}

TEST_F(ReportLimitsTest, BytesPerReport) {
  Make({.max_report_bytes = 1000});
  const std::string job = JobWithWorker();
  v1::ReportStepRequest r = Report(job, 1, 0);
  // Grow the one action name until the report is exactly at the limit.
  r.mutable_timings(0)->set_action(std::string(1000 - r.ByteSizeLong(), 'F'));
  while (r.ByteSizeLong() > 1000) r.mutable_timings(0)->mutable_action()->pop_back();
  ASSERT_EQ(r.ByteSizeLong(), 1000u);
  EXPECT_TRUE(registry_->ReportStep(r).ok());
  r.mutable_timings(0)->mutable_action()->push_back('F');
  ExpectOver(registry_->ReportStep(r).status(), "--max-report-bytes=1000");
  // A refused report is not stored.
  auto stored = registry_->RecentStepReports(job, 10, int64_t{1} << 30);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 1u);
}

// A CPU pool the planner cannot model is refused, naming the field, and
// the report is not stored.
TEST_F(ReportLimitsTest, CpuUseMustNameAPoolCpusAndThreads) {
  Make({});
  const std::string job = JobWithWorker();
  v1::ReportStepRequest good = Report(job, 1, 2);
  good.mutable_cpu_use()->set_pool("node7:0-1");
  good.mutable_cpu_use()->set_cpus(2);
  good.mutable_cpu_use()->set_threads(1);
  EXPECT_TRUE(registry_->ReportStep(good).ok());
  for (const auto& [field, bad] :
       std::vector<std::pair<std::string, v1::CpuUse>>{{"cpu_use.pool",
                                                        [&] {
                                                          v1::CpuUse c = good.cpu_use();
                                                          c.clear_pool();
                                                          return c;
                                                        }()},
                                                       {"cpu_use.cpus",
                                                        [&] {
                                                          v1::CpuUse c = good.cpu_use();
                                                          c.set_cpus(0);
                                                          return c;
                                                        }()},
                                                       {"cpu_use.threads", [&] {
                                                          v1::CpuUse c = good.cpu_use();
                                                          c.set_threads(-1);
                                                          return c;
                                                        }()}}) {
    v1::ReportStepRequest r = good;
    r.set_step(1);
    *r.mutable_cpu_use() = bad;
    const absl::Status s = registry_->ReportStep(r).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field << ": " << s;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  }
  auto stored = registry_->RecentStepReports(job, 10, int64_t{1} << 30);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 1u);
}

}  // namespace
}  // namespace pipeplan::server
