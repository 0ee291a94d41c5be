#include "pipeplan/server/rpc/planner_handlers.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/obs/log.h"
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
  // A job of testing::SmallRequest (4 stages).
  absl::StatusOr<v1::Job> CreateSmallJob() {
    return Await<v1::Job>([&](Callback<v1::Job> cb) {
      v1::CreateJobRequest r;
      r.set_name("j");
      *r.mutable_request() = testing::SmallRequest();
      handlers_->HandleCreateJob(r, {}, cb);
    });
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
  EXPECT_NE(s.status().message().find("over the limit --max-nodes=1000"), std::string::npos)
      << s.status();

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
  absl::StatusOr<v1::Job> job = CreateSmallJob();
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

// Issue 26: workers poll the contingencies' view every second; it carries
// no graph or plan, and no contingency plans while the caller holds the
// current generation. A refresh gets a newer generation.
TEST_F(PlannerHandlersTest, TheContingencyViewCarriesPlansOnlyForANewGeneration) {
  absl::StatusOr<v1::Job> job = CreateSmallJob();
  ASSERT_TRUE(job.ok()) << job.status();
  v1::GetPlanRequest view;
  view.set_job_id(job->id());
  view.set_view(v1::PLAN_VIEW_CONTINGENCIES);
  absl::StatusOr<v1::VersionedPlan> none = handlers_->GetPlan(view);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->version(), 1);
  EXPECT_EQ(none->contingency_generation(), 0) << "none computed yet";

  v1::ContingencyPlan c;
  c.add_lost_devices("gpu3");
  *c.mutable_plan() = job->plan();
  ASSERT_TRUE(handlers_->registry().SetContingencies(job->id(), 1, {c}).ok());
  absl::StatusOr<v1::VersionedPlan> first = handlers_->GetPlan(view);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(first->contingency_generation(), 0);
  ASSERT_EQ(first->contingencies_size(), 1);
  EXPECT_FALSE(first->has_plan());
  EXPECT_FALSE(first->has_request()) << "the graph travels with every poll";
  view.set_known_contingency_generation(first->contingency_generation());
  absl::StatusOr<v1::VersionedPlan> same = handlers_->GetPlan(view);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->contingency_generation(), first->contingency_generation());
  EXPECT_EQ(same->contingencies_size(), 0) << "plans the caller holds sent again";

  ASSERT_TRUE(handlers_->registry().SetContingencies(job->id(), 1, {c, c}).ok());
  absl::StatusOr<v1::VersionedPlan> refreshed = handlers_->GetPlan(view);
  ASSERT_TRUE(refreshed.ok()) << refreshed.status();
  EXPECT_GT(refreshed->contingency_generation(), first->contingency_generation());
  EXPECT_EQ(refreshed->contingencies_size(), 2);

  v1::GetPlanRequest full;
  full.set_job_id(job->id());
  absl::StatusOr<v1::VersionedPlan> whole = handlers_->GetPlan(full);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(whole->has_request());
  EXPECT_EQ(whole->contingencies_size(), 2);
  EXPECT_EQ(whole->contingency_generation(), refreshed->contingency_generation());

  view.set_view(static_cast<v1::PlanView>(7));
  EXPECT_EQ(handlers_->GetPlan(view).status().code(), absl::StatusCode::kInvalidArgument);
  view.set_view(v1::PLAN_VIEW_CONTINGENCIES);
  view.set_job_id("job-none");
  EXPECT_EQ(handlers_->GetPlan(view).status().code(), absl::StatusCode::kNotFound);
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

// Solves hold their estimated memory from admission to answer; past the
// budget Plan, CreateJob and ReplanJob answer RESOURCE_EXHAUSTED naming it,
// while cached answers need no budget.
TEST_F(PlannerHandlersTest, SolvesAreAdmittedByTheMemoryBudget) {
  const v1::PlanRequest req = testing::SmallRequest();
  const int64_t need = EstimateSolveBytes(req, static_cast<int64_t>(req.ByteSizeLong()));
  HandlerOptions o;
  o.solver_threads = 1;
  o.solve_memory_bytes = need + need / 2;  // room for one solve, not two
  PlannerHandlers h(o, store_.get(), RealClock());

  auto plan = Await<v1::Plan>([&](Callback<v1::Plan> cb) { h.HandlePlan(req, {}, cb); });
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(h.pool().WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(h.memory_budget().in_use(), 0);  // given back after the answer

  // Someone else holds most of the budget: a new solve does not fit...
  auto held = h.memory_budget().TryReserve(need);
  ASSERT_TRUE(held.ok());
  v1::PlanRequest other = req;
  other.mutable_options()->set_microbatches(16);
  auto refused = Await<v1::Plan>([&](Callback<v1::Plan> cb) { h.HandlePlan(other, {}, cb); });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--solve-memory-bytes="), std::string::npos)
      << refused.status();
  v1::CreateJobRequest create;
  create.set_name("j");
  *create.mutable_request() = other;
  auto job = Await<v1::Job>([&](Callback<v1::Job> cb) { h.HandleCreateJob(create, {}, cb); });
  EXPECT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted);
  // ...but the cached answer still comes back.
  EXPECT_TRUE(Await<v1::Plan>([&](Callback<v1::Plan> cb) { h.HandlePlan(req, {}, cb); }).ok());
  held->reset();
  EXPECT_TRUE(Await<v1::Plan>([&](Callback<v1::Plan> cb) { h.HandlePlan(other, {}, cb); }).ok());
  ASSERT_TRUE(h.pool().WaitIdle(absl::Seconds(5)));
}

TEST_F(PlannerHandlersTest, ARequestLargerThanTheBudgetIsRefusedUpFront) {
  HandlerOptions o;
  o.solve_memory_bytes = 1 << 20;
  PlannerHandlers h(o, store_.get(), RealClock());
  auto s = Await<v1::Plan>(
      [&](Callback<v1::Plan> cb) { h.HandlePlan(testing::SmallRequest(), {}, cb); });
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find(
                "more than the whole solve memory budget --solve-memory-bytes=1048576"),
            std::string::npos)
      << s.status();
}

TEST_F(PlannerHandlersTest, DevicesOverTheLimit) {
  HandlerOptions o;
  o.max_cluster_devices = 8;
  PlannerHandlers h(o, store_.get(), RealClock());
  v1::PlanRequest req = testing::SmallRequest();
  ASSERT_EQ(req.cluster().devices_size(), 8);
  EXPECT_TRUE(Await<v1::Plan>([&](Callback<v1::Plan> cb) { h.HandlePlan(req, {}, cb); }).ok());
  *req.mutable_cluster()->add_devices() = req.cluster().devices(0);
  auto s = Await<v1::Plan>([&](Callback<v1::Plan> cb) { h.HandlePlan(req, {}, cb); });
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("cluster.devices has 9 entries, over the limit "
                                      "--max-devices=8"),
            std::string::npos)
      << s.status();
}

// ListStepReports answers the newest reports that fit its byte bound.
TEST_F(PlannerHandlersTest, ListStepReportsIsBoundedInBytes) {
  HandlerOptions o;
  o.max_list_report_bytes = 10'000;
  PlannerHandlers h(o, store_.get(), RealClock());
  auto job = Await<v1::Job>([&](Callback<v1::Job> cb) {
    v1::CreateJobRequest r;
    r.set_name("j");
    *r.mutable_request() = testing::SmallRequest();
    h.HandleCreateJob(r, {}, cb);
  });
  ASSERT_TRUE(job.ok()) << job.status();
  v1::RegisterWorkerRequest reg;
  reg.set_job_id(job->id());
  reg.mutable_worker()->set_worker_id("w");
  reg.mutable_worker()->set_device_id(job->plan().stages(0).device_id());
  ASSERT_TRUE(h.RegisterWorker(reg).ok());
  for (int step = 0; step < 10; ++step) {
    v1::ReportStepRequest r;
    r.set_job_id(job->id());
    r.set_worker_id("w");
    r.set_step(step);
    r.set_plan_version(1);
    r.add_timings()->set_action(std::string(3000, 'F'));
    ASSERT_TRUE(h.ReportStep(r).ok());
  }
  v1::ListStepReportsRequest list;
  list.set_job_id(job->id());
  auto got = h.ListStepReports(list);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->reports_size(), 3);     // 3 x ~3 KB fit in 10,000 bytes
  EXPECT_EQ(got->reports(0).step(), 7);  // oldest first
  EXPECT_EQ(got->reports(2).step(), 9);
}

// A replan by hand (`jobs replan`) places stages only on devices with an
// ACTIVE worker, like the policy's: not on a lost worker's device nor on
// devices no worker runs on, and a request for more ranks than live workers
// gets one rank per live worker. With no live worker at all it is refused.
TEST_F(PlannerHandlersTest, ReplanJobPlansOnlyOntoLiveWorkers) {
  FakeClock clock;
  HandlerOptions o;
  o.solver_threads = 2;
  o.registry.lease = absl::Seconds(10);
  PlannerHandlers h(o, store_.get(), &clock);
  auto job = Await<v1::Job>([&](Callback<v1::Job> cb) {
    v1::CreateJobRequest r;
    r.set_name("j");
    *r.mutable_request() = testing::SmallRequest();  // 4 ranks on 8 devices
    h.HandleCreateJob(r, {}, cb);
  });
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->plan().stages_size(), 4);
  std::vector<std::string> devices;
  for (const v1::Stage& st : job->plan().stages()) devices.push_back(st.device_id());
  for (int w = 0; w < 4; ++w) {
    v1::RegisterWorkerRequest reg;
    reg.set_job_id(job->id());
    reg.mutable_worker()->set_worker_id(absl::StrCat("w", w));
    reg.mutable_worker()->set_device_id(devices[w]);
    ASSERT_TRUE(h.RegisterWorker(reg).ok());
  }
  // w3 misses its lease; the others heartbeat.
  clock.Advance(absl::Seconds(11));
  for (int w = 0; w < 3; ++w) {
    v1::HeartbeatRequest hb;
    hb.set_job_id(job->id());
    hb.set_worker_id(absl::StrCat("w", w));
    ASSERT_TRUE(h.Heartbeat(hb).ok());
  }
  ASSERT_EQ(h.registry().CheckLeases(), 1);
  auto replan = [&] {
    return Await<v1::VersionedPlan>([&](Callback<v1::VersionedPlan> cb) {
      v1::ReplanJobRequest r;
      r.set_job_id(job->id());
      h.HandleReplanJob(r, {}, cb);
    });
  };
  auto v2 = replan();
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version(), 2);
  ASSERT_EQ(v2->plan().stages_size(), 3);
  const std::set<std::string> live(devices.begin(), devices.begin() + 3);
  for (const v1::Stage& st : v2->plan().stages()) {
    EXPECT_TRUE(live.contains(st.device_id())) << st.device_id() << " has no live worker";
  }
  EXPECT_NE(v2->reason().find(devices[3]), std::string::npos) << v2->reason();
  // The stored request stays the job's whole cluster.
  EXPECT_EQ(v2->request().cluster().devices_size(), 8);

  // Nobody live: nothing to plan onto.
  clock.Advance(absl::Seconds(11));
  ASSERT_EQ(h.registry().CheckLeases(), 3);
  EXPECT_EQ(replan().status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace pipeplan::server
