#include "pipeplan/server/planner_handlers.h"

#include <gtest/gtest.h>

#include "absl/synchronization/notification.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/server/log.h"
#include "test_util.h"

namespace pipeplan::server {
namespace {

// Runs a callback-style handler and waits for its answer (bounded).
template <typename T, typename F>
absl::StatusOr<T> Await(F start) {
  auto done = std::make_shared<absl::Notification>();
  auto result = std::make_shared<absl::StatusOr<T>>(absl::UnknownError("no answer"));
  start([done, result](absl::StatusOr<T> r) {
    *result = std::move(r);
    done->Notify();
  });
  if (!done->WaitForNotificationWithTimeout(absl::Seconds(60))) {
    return absl::DeadlineExceededError("handler did not answer within 60 s");
  }
  return *result;
}

class PlannerHandlersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogEnabled(false);
    store_ = NewMemoryStore();
    HandlerOptions o;
    o.solver_threads = 2;
    o.limits.max_nodes = 1000;
    o.limits.max_edges = 5000;
    handlers_ = std::make_unique<PlannerHandlers>(o, store_.get(), RealClock());
  }
  void TearDown() override {
    handlers_.reset();
    SetLogEnabled(true);
  }
  absl::StatusOr<v1::Plan> Plan(const v1::PlanRequest& r, CallContext ctx = {}) {
    return Await<v1::Plan>([&](Callback<v1::Plan> cb) { handlers_->HandlePlan(r, ctx, cb); });
  }
  std::unique_ptr<Store> store_;
  std::unique_ptr<PlannerHandlers> handlers_;
};

TEST_F(PlannerHandlersTest, PlanEqualsLibraryAndSecondCallIsCached) {
  const v1::PlanRequest req = testing::SmallRequest();
  auto in = PlanInputs::FromRequest(req);
  ASSERT_TRUE(in.ok());
  auto lib = MakePlan(*in->graph, *in->cluster, in->options);
  ASSERT_TRUE(lib.ok());
  const v1::Plan want = PlanToProto(*in->graph, *in->cluster, *lib);

  auto got = Plan(req);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::vector<int>(got->node_stage().begin(), got->node_stage().end()),
            std::vector<int>(want.node_stage().begin(), want.node_stage().end()));
  EXPECT_DOUBLE_EQ(got->solver().objective(), want.solver().objective());
  EXPECT_EQ(handlers_->cache().hits(), 0u);

  auto again = Plan(req);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(handlers_->cache().hits(), 1u);
  EXPECT_EQ(again->SerializeAsString(), got->SerializeAsString());
  EXPECT_TRUE(handlers_->pool().WaitIdle(absl::Seconds(5)));
}

TEST_F(PlannerHandlersTest, BadInputsKeepTheCoresFieldLevelMessages) {
  v1::PlanRequest req = testing::SmallRequest();
  req.mutable_graph()->mutable_edges(3)->set_dst("fc9");
  auto s = Plan(req);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("graph.edges[3].dst \"fc9\" is not a node"),
            std::string::npos)
      << s.status();

  req = testing::SmallRequest();
  for (int i = 0; i < 1001; ++i) req.mutable_graph()->add_nodes()->set_id("x" + std::to_string(i));
  s = Plan(req);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("at most 1000"), std::string::npos);

  req = testing::SmallRequest();
  for (auto& d : *req.mutable_cluster()->mutable_devices()) d.set_memory_bytes(1e6);
  s = Plan(req);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("needs about"), std::string::npos) << s.status();

  req = testing::SmallRequest();
  req.mutable_options()->set_num_ranks(-3);
  EXPECT_EQ(Plan(req).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PlannerHandlersTest, CancelledAndExpiredCallsDoNotSolve) {
  v1::PlanRequest req = testing::SmallRequest();
  req.mutable_options()->set_microbatches(9);  // not cached
  CallContext cancelled;
  cancelled.cancelled->store(true);
  EXPECT_EQ(Plan(req, cancelled).status().code(), absl::StatusCode::kCancelled);
  CallContext expired;
  expired.deadline = absl::Now() - absl::Seconds(1);
  EXPECT_EQ(Plan(req, expired).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(handlers_->pool().WaitIdle(absl::Seconds(5)));
}

TEST_F(PlannerHandlersTest, JobsAndReplan) {
  auto job = Await<v1::Job>([&](Callback<v1::Job> cb) {
    v1::CreateJobRequest r;
    r.set_name("j");
    *r.mutable_request() = testing::SmallRequest();
    handlers_->HandleCreateJob(r, {}, cb);
  });
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->plan_version(), 1);
  EXPECT_EQ(job->plan().stages_size(), 4);

  auto v2 = Await<v1::VersionedPlan>([&](Callback<v1::VersionedPlan> cb) {
    v1::ReplanJobRequest r;
    r.set_job_id(job->id());
    *r.mutable_options() = testing::SmallRequest().options();
    r.mutable_options()->set_num_ranks(2);
    r.set_reason("fewer stages");
    handlers_->HandleReplanJob(r, {}, cb);
  });
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version(), 2);
  EXPECT_EQ(v2->plan().stages_size(), 2);
  EXPECT_EQ(v2->request().options().num_ranks(), 2);
  EXPECT_EQ(v2->reason(), "fewer stages");

  v1::GetPlanRequest g;
  g.set_job_id(job->id());
  g.set_version(1);
  auto v1p = handlers_->GetPlan(g);
  ASSERT_TRUE(v1p.ok());
  EXPECT_EQ(v1p->plan().stages_size(), 4);

  auto missing = Await<v1::VersionedPlan>([&](Callback<v1::VersionedPlan> cb) {
    v1::ReplanJobRequest r;
    r.set_job_id("job-none");
    handlers_->HandleReplanJob(r, {}, cb);
  });
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(PlannerHandlersTest, FullPoolAnswersResourceExhausted) {
  HandlerOptions o;
  o.solver_threads = 1;
  o.max_concurrent_solves = 1;
  PlannerHandlers small(o, store_.get(), RealClock());
  absl::Notification release;
  ASSERT_TRUE(small.pool().Submit([&] { release.WaitForNotification(); }).ok());
  auto s = Await<v1::Plan>(
      [&](Callback<v1::Plan> cb) { small.HandlePlan(testing::SmallRequest(), {}, cb); });
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  release.Notify();
}

}  // namespace
}  // namespace pipeplan::server
