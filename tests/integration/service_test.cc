// pipeplan-planner as a process: planning, jobs, workers, limits, restarts,
// health and the CLI, all over 127.0.0.1.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"
#include "planner_process.h"

namespace pipeplan::testing {
namespace {

using client::PlannerClient;

#define ASSERT_OK_AND_ASSIGN(lhs, expr)            \
  auto lhs##_or = (expr);                          \
  ASSERT_TRUE(lhs##_or.ok()) << lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

std::unique_ptr<PlannerProcess> MustStart(std::vector<std::string> args = {}) {
  auto p = PlannerProcess::Start(std::move(args));
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return nullptr;
  }
  return *std::move(p);
}

v1::WorkerInfo Worker(const std::string& id, const std::string& device) {
  v1::WorkerInfo w;
  w.set_worker_id(id);
  w.set_device_id(device);
  w.set_host("127.0.0.1");
  w.set_memory_bytes(80e9);
  w.set_measured_bandwidth_bytes_per_second(1e11);
  return w;
}

TEST(PlannerService, PlanOverGrpcEqualsLibrary) {
  auto planner = MustStart();
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  const v1::PlanRequest req = SmallRequest();
  ASSERT_OK_AND_ASSIGN(remote, c->Plan(req));

  auto in = PlanInputs::FromRequest(req);
  ASSERT_TRUE(in.ok());
  auto lib = MakePlan(*in->graph, *in->cluster, in->options);
  ASSERT_TRUE(lib.ok());
  const v1::Plan local = PlanToProto(*in->graph, *in->cluster, *lib);
  EXPECT_EQ(std::vector<int>(remote.node_stage().begin(), remote.node_stage().end()),
            std::vector<int>(local.node_stage().begin(), local.node_stage().end()));
  EXPECT_DOUBLE_EQ(remote.solver().objective(), local.solver().objective());
  EXPECT_DOUBLE_EQ(remote.step_seconds(), local.step_seconds());
  EXPECT_EQ(remote.stages_size(), 4);

  // The same request again is answered from the cache.
  ASSERT_OK_AND_ASSIGN(again, c->Plan(req));
  EXPECT_EQ(again.SerializeAsString(), remote.SerializeAsString());
  ASSERT_OK_AND_ASSIGN(metrics, ScrapeMetrics(planner->metrics_port()));
  EXPECT_TRUE(absl::StrContains(metrics, "pipeplan_plan_cache_lookups_total{result=\"hit\"} 1"))
      << metrics;
}

// A planner that answers the HTTP/2 handshake late (paused here with
// SIGSTOP for 0.5 s; a loaded host or a sanitizer build in practice) still
// gets the client's first call: the client waits for its SETTINGS instead of
// failing the call with UNAVAILABLE after 100 ms.
TEST(PlannerService, FirstCallWaitsForALateHandshake) {
  auto planner = MustStart();
  ASSERT_NE(planner, nullptr);
  auto c = planner->Client();
  ASSERT_TRUE(c.ok()) << c.status();
  planner->Signal(SIGSTOP);
  absl::StatusOr<v1::ListJobsResponse> jobs;
  std::thread call([&] { jobs = (*c)->ListJobs(); });
  absl::SleepFor(absl::Milliseconds(500));
  planner->Signal(SIGCONT);
  call.join();
  EXPECT_TRUE(jobs.ok()) << jobs.status();
}

TEST(PlannerService, SixtyFourConcurrentPlansAllSucceed) {
  auto planner = MustStart();
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  constexpr int kCalls = 64;
  std::atomic<int> ok{0};
  std::vector<std::string> errors(kCalls);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&, i] {
      v1::PlanRequest req = SmallRequest();
      req.mutable_options()->set_time_limit_seconds(10 + i);  // distinct: no cache hits
      auto plan = c->Plan(req, absl::Seconds(60));
      if (plan.ok() && plan->stages_size() == 4) {
        ok++;
      } else {
        errors[i] = plan.status().ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kCalls) << errors[0];
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

TEST(PlannerService, DeadlineStopsTheSolveAndLeaksNoSolverThread) {
  auto planner = MustStart({"--solver-threads", "2"});
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  // Big enough that parsing, validating and the first candidate's split take
  // longer than the deadline (the planner answers with its best plan when it
  // has one in time, so a smaller graph can legitimately succeed).
  const v1::PlanRequest big = ChainRequest(400000);
  const absl::Time start = absl::Now();
  auto plan = c->Plan(big, absl::Milliseconds(300));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded) << plan.status();
  // The solve stops with the call: the pool goes idle long before an
  // unbounded solve of this graph (many seconds) would end.
  bool idle = false;
  while (absl::Now() - start < absl::Seconds(4)) {
    ASSERT_OK_AND_ASSIGN(m, ScrapeMetrics(planner->metrics_port()));
    if (absl::StrContains(m, "pipeplan_solves{state=\"running\"} 0") &&
        absl::StrContains(m, "pipeplan_solves{state=\"queued\"} 0")) {
      idle = true;
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(idle) << "solver pool still busy " << absl::Now() - start << " after the deadline";
  // And the service still answers.
  EXPECT_TRUE(c->Plan(SmallRequest()).ok());
}

TEST(PlannerService, BadInputsAnswerTheirCodeAndMessage) {
  auto planner = MustStart({"--max-nodes", "500", "--max-message-bytes", "400000"});
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());

  v1::PlanRequest req = SmallRequest();
  req.mutable_graph()->mutable_edges(5)->set_dst("fc9");
  auto s = c->Plan(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "graph.edges[5].dst \"fc9\" is not a node")) << s;

  req = SmallRequest();
  req.mutable_options()->set_schedule(static_cast<v1::Schedule>(99));
  EXPECT_EQ(c->Plan(req).status().code(), absl::StatusCode::kInvalidArgument);

  req = SmallRequest();
  *req.mutable_graph() = ReadJson<v1::ModelGraph>("gpt_1k.json");
  s = c->Plan(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "over the limit --max-nodes=500")) << s;

  req = SmallRequest();
  *req.mutable_graph() = ReadJson<v1::ModelGraph>("gpt_4k.json");
  ASSERT_GT(req.ByteSizeLong(), 400000u);
  EXPECT_EQ(c->Plan(req).status().code(), absl::StatusCode::kResourceExhausted);

  req = SmallRequest();
  for (auto& d : *req.mutable_cluster()->mutable_devices()) d.set_memory_bytes(1e6);
  s = c->Plan(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "needs about")) << s;

  EXPECT_EQ(c->GetJob("job-missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->GetPlan("job-missing", 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->DeleteJob("job-missing").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c->Heartbeat("job-missing", "w").status().code(), absl::StatusCode::kNotFound);

  ASSERT_OK_AND_ASSIGN(job, c->CreateJob("bad-input", SmallRequest()));
  EXPECT_EQ(c->RegisterWorker(job.id(), Worker("w", "tpu7")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->RegisterWorker(job.id(), Worker("", "gpu0")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->GetPlan(job.id(), -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->GetPlan(job.id(), 7).status().code(), absl::StatusCode::kNotFound);

  // Still healthy after all of that.
  EXPECT_TRUE(c->Plan(SmallRequest()).ok());
}

TEST(PlannerService, TooManyConcurrentSolvesIsResourceExhausted) {
  auto planner = MustStart({"--solver-threads", "1", "--max-concurrent-solves", "1"});
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  std::atomic<int> exhausted{0}, ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      v1::PlanRequest req = ChainRequest(20000);
      req.mutable_options()->set_time_limit_seconds(1 + i);
      auto r = c->Plan(req, absl::Seconds(30));
      if (r.ok()) ok++;
      if (r.status().code() == absl::StatusCode::kResourceExhausted) exhausted++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(ok.load(), 1);
  EXPECT_GE(exhausted.load(), 1);
  EXPECT_EQ(ok.load() + exhausted.load(), 4);
}

TEST(PlannerService, WorkersWatchReportAndReplan) {
  auto planner = MustStart();
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  ASSERT_OK_AND_ASSIGN(job, c->CreateJob("train", SmallRequest()));
  EXPECT_EQ(job.plan_version(), 1);
  ASSERT_OK_AND_ASSIGN(a, c->RegisterWorker(job.id(), Worker("w1", "gpu1")));
  EXPECT_EQ(a.rank(), 1);
  EXPECT_EQ(a.plan_version(), 1);
  EXPECT_GT(a.lease_seconds(), 0);

  v1::WatchPlanRequest wr;
  wr.set_job_id(job.id());
  wr.set_worker_id("w1");
  auto watch = c->WatchPlan(wr);
  v1::PlanUpdate u;
  ASSERT_TRUE(watch->Next(&u));
  EXPECT_EQ(u.version(), 1);
  EXPECT_EQ(u.rank(), 1);
  EXPECT_EQ(u.plan().stages_size(), 4);

  v1::ReportStepRequest report;
  report.set_job_id(job.id());
  report.set_worker_id("w1");
  report.set_step(1);
  report.set_plan_version(1);
  report.set_step_seconds(0.004);
  report.set_peak_memory_bytes(5e8);
  auto* t = report.add_timings();
  t->set_action("1F0");
  t->set_seconds(0.0003);
  ASSERT_OK_AND_ASSIGN(rr, c->ReportStep(report));
  EXPECT_EQ(rr.current_plan_version(), 1);

  // A replan plans only onto devices with a live worker: a second one for 2
  // ranks.
  ASSERT_OK_AND_ASSIGN(a0, c->RegisterWorker(job.id(), Worker("w0", "gpu0")));
  EXPECT_EQ(a0.rank(), 0);
  v1::ReplanJobRequest replan;
  replan.set_job_id(job.id());
  *replan.mutable_options() = SmallRequest().options();
  replan.mutable_options()->set_num_ranks(2);
  replan.set_reason("test replan");
  ASSERT_OK_AND_ASSIGN(v2, c->ReplanJob(replan));
  EXPECT_EQ(v2.version(), 2);
  ASSERT_TRUE(watch->Next(&u));
  EXPECT_EQ(u.version(), 2);
  EXPECT_EQ(u.plan().stages_size(), 2);
  EXPECT_EQ(u.rank(), 1);

  // A last step of version 1 is kept; the answer says version 2 is current.
  auto stale = c->ReportStep(report);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ(stale->current_plan_version(), 2);
  report.set_plan_version(3);
  EXPECT_EQ(c->ReportStep(report).status().code(), absl::StatusCode::kFailedPrecondition);
  report.set_plan_version(2);
  report.set_step(2);
  EXPECT_TRUE(c->ReportStep(report).ok());
  ASSERT_OK_AND_ASSIGN(hb, c->Heartbeat(job.id(), "w1"));
  EXPECT_EQ(hb.current_plan_version(), 2);

  ASSERT_OK_AND_ASSIGN(shown, c->GetJob(job.id()));
  EXPECT_EQ(shown.plan_version(), 2);
  ASSERT_EQ(shown.workers_size(), 2);  // sorted by id: w0, w1
  EXPECT_EQ(shown.workers(1).last_step(), 2);
  ASSERT_OK_AND_ASSIGN(old, c->GetPlan(job.id(), 1));
  EXPECT_EQ(old.plan().stages_size(), 4);
  EXPECT_EQ(old.request().options().num_ranks(), 4);

  ASSERT_OK_AND_ASSIGN(metrics, ScrapeMetrics(planner->metrics_port()));
  EXPECT_TRUE(
      absl::StrContains(metrics, absl::StrCat("pipeplan_plan_version{job=\"", job.id(), "\"} 2")))
      << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "pipeplan_workers{state=\"active\"} 2"));
  EXPECT_TRUE(absl::StrContains(metrics, "pipeplan_jobs 1"));
  // The current plan's predictions are exported with its version.
  ASSERT_OK_AND_ASSIGN(current, c->GetPlan(job.id(), 0));
  for (const auto& [name, value] :
       {std::pair{"pipeplan_plan_step_seconds", current.plan().step_seconds()},
        std::pair{"pipeplan_plan_bubble_ratio", current.plan().bubble_ratio()}}) {
    const std::string prefix = absl::StrCat(name, "{job=\"", job.id(), "\"} ");
    const size_t at = metrics.find(prefix);
    ASSERT_NE(at, std::string::npos) << name << "\n" << metrics;
    const double exported = std::stod(metrics.substr(at + prefix.size()));
    EXPECT_NEAR(exported, value, 1e-9 * std::max(1.0, value)) << name;
  }

  // Deleting the job ends the stream.
  ASSERT_TRUE(c->DeleteJob(job.id()).ok());
  EXPECT_FALSE(watch->Next(&u));
  EXPECT_EQ(watch->Finish().code(), absl::StatusCode::kNotFound);
}

TEST(PlannerService, MissedLeaseMarksWorkerLost) {
  auto planner = MustStart({"--lease-seconds", "0.5"});
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  ASSERT_OK_AND_ASSIGN(job, c->CreateJob("lease", SmallRequest()));
  ASSERT_TRUE(c->RegisterWorker(job.id(), Worker("w1", "gpu0")).ok());
  bool lost = false;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(5) && !lost) {
    ASSERT_OK_AND_ASSIGN(j, c->GetJob(job.id()));
    lost = j.workers(0).state() == v1::WORKER_LOST;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(lost);
  ASSERT_OK_AND_ASSIGN(metrics, ScrapeMetrics(planner->metrics_port()));
  EXPECT_TRUE(absl::StrContains(metrics, "pipeplan_workers{state=\"lost\"} 1")) << metrics;
  ASSERT_TRUE(c->Heartbeat(job.id(), "w1").ok());
  ASSERT_OK_AND_ASSIGN(j, c->GetJob(job.id()));
  EXPECT_EQ(j.workers(0).state(), v1::WORKER_ACTIVE);
}

TEST(PlannerService, Sigkill_RestartRecoversEveryJobAndVersion) {
  TempDir dir;
  const std::vector<std::string> args = {"--data-dir", dir.path() + "/state"};
  std::string job1, job2;
  v1::VersionedPlan v1_before, v2_before;
  {
    auto planner = MustStart(args);
    ASSERT_NE(planner, nullptr);
    ASSERT_OK_AND_ASSIGN(c, planner->Client());
    ASSERT_OK_AND_ASSIGN(a, c->CreateJob("first", SmallRequest()));
    ASSERT_OK_AND_ASSIGN(b, c->CreateJob("second", SmallRequest()));
    job1 = a.id();
    job2 = b.id();
    v1::ReplanJobRequest replan;
    replan.set_job_id(job1);
    *replan.mutable_options() = SmallRequest().options();
    replan.mutable_options()->set_num_ranks(2);
    ASSERT_TRUE(c->ReplanJob(replan).ok());
    ASSERT_TRUE(c->RegisterWorker(job1, Worker("w1", "gpu0")).ok());
    v1::ReportStepRequest r;
    r.set_job_id(job1);
    r.set_worker_id("w1");
    r.set_plan_version(2);
    for (int step = 0; step < 20; ++step) {
      r.set_step(step);
      ASSERT_TRUE(c->ReportStep(r).ok());
    }
    ASSERT_OK_AND_ASSIGN(p1, c->GetPlan(job1, 1));
    ASSERT_OK_AND_ASSIGN(p2, c->GetPlan(job1, 2));
    v1_before = p1;
    v2_before = p2;
    planner->Signal(SIGKILL);
    EXPECT_EQ(planner->Wait(absl::Seconds(10)), 128 + SIGKILL);
  }
  auto planner = MustStart(args);
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  ASSERT_OK_AND_ASSIGN(jobs, c->ListJobs());
  ASSERT_EQ(jobs.jobs_size(), 2);
  ASSERT_OK_AND_ASSIGN(j1, c->GetJob(job1));
  EXPECT_EQ(j1.name(), "first");
  EXPECT_EQ(j1.plan_version(), 2);
  ASSERT_EQ(j1.workers_size(), 1);
  EXPECT_EQ(j1.workers(0).last_step(), 19);
  ASSERT_OK_AND_ASSIGN(j2, c->GetJob(job2));
  EXPECT_EQ(j2.plan_version(), 1);
  ASSERT_OK_AND_ASSIGN(p1, c->GetPlan(job1, 1));
  ASSERT_OK_AND_ASSIGN(p2, c->GetPlan(job1, 2));
  EXPECT_EQ(p1.SerializeAsString(), v1_before.SerializeAsString());
  EXPECT_EQ(p2.SerializeAsString(), v2_before.SerializeAsString());
  // The worker reconnects without registering again.
  EXPECT_TRUE(c->Heartbeat(job1, "w1").ok());
  v1::WatchPlanRequest wr;
  wr.set_job_id(job1);
  wr.set_worker_id("w1");
  wr.set_known_version(1);
  auto watch = c->WatchPlan(wr);
  v1::PlanUpdate u;
  ASSERT_TRUE(watch->Next(&u));
  EXPECT_EQ(u.version(), 2);
  EXPECT_EQ(u.rank(), 0);
  watch->Cancel();
}

TEST(PlannerService, HealthFlipsDuringDrainAndStreamsEndCleanly) {
  auto planner = MustStart({"--drain-seconds", "1.5"});
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  ASSERT_OK_AND_ASSIGN(serving, c->CheckHealth());
  EXPECT_TRUE(serving);
  ASSERT_OK_AND_ASSIGN(svc, c->CheckHealth("pipeplan.v1.PlannerService"));
  EXPECT_TRUE(svc);
  ASSERT_OK_AND_ASSIGN(job, c->CreateJob("drain", SmallRequest()));
  v1::WatchPlanRequest wr;
  wr.set_job_id(job.id());
  auto watch = c->WatchPlan(wr);
  v1::PlanUpdate u;
  ASSERT_TRUE(watch->Next(&u));

  planner->Signal(SIGTERM);
  bool not_serving = false;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(3) && !not_serving) {
    auto h = c->CheckHealth("", absl::Milliseconds(500));
    not_serving = h.ok() && !*h;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(not_serving);
  // New work is refused while draining.
  EXPECT_EQ(c->ListJobs().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(watch->Next(&u));
  EXPECT_TRUE(watch->Finish().ok());
  EXPECT_EQ(planner->Wait(absl::Seconds(15)), 0) << planner->stderr_text();
}

// Random bytes and truncated messages on every method: each call gets an
// error status, the planner keeps serving and its state is unchanged.
TEST(PlannerService, GarbageOnTheWireCannotCrashOrCorrupt) {
  auto planner = MustStart();
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  ASSERT_OK_AND_ASSIGN(job, c->CreateJob("keep", SmallRequest()));
  grpc::GenericStub stub(c->channel());
  std::mt19937 rng(42);
  const std::string valid = SmallRequest().SerializeAsString();
  const char* methods[] = {"Plan",      "CreateJob",      "GetJob",     "DeleteJob", "GetPlan",
                           "ReplanJob", "RegisterWorker", "ReportStep", "Heartbeat", "ListJobs"};
  int answered = 0;
  for (int i = 0; i < 200; ++i) {
    std::string bytes;
    if (i % 2 == 0) {
      bytes = valid.substr(0, rng() % valid.size());  // truncated
    } else {
      bytes.resize(rng() % 512);
      for (char& ch : bytes) ch = static_cast<char>(rng());
    }
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&ctx, absl::StrCat("/pipeplan.v1.PlannerService/", methods[i % 10]),
                   grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(15)));
    answered++;
  }
  EXPECT_EQ(answered, 200);
  ASSERT_OK_AND_ASSIGN(after, c->GetJob(job.id()));
  EXPECT_EQ(after.plan_version(), 1);
  EXPECT_TRUE(c->Plan(SmallRequest()).ok());
  ASSERT_OK_AND_ASSIGN(health, c->CheckHealth());
  EXPECT_TRUE(health);
}

TEST(PlannerService, AddressInUseIsAClearError) {
  auto first = MustStart();
  ASSERT_NE(first, nullptr);
  auto second = PlannerProcess::Start({"--listen", first->address()});
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), "in use")) << second.status();
}

TEST(PlannerService, MetricsEndpointHasTheDocumentedFamilies) {
  auto planner = MustStart();
  ASSERT_NE(planner, nullptr);
  ASSERT_OK_AND_ASSIGN(c, planner->Client());
  ASSERT_TRUE(c->Plan(SmallRequest()).ok());
  EXPECT_EQ(c->GetJob("nope").status().code(), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(m, ScrapeMetrics(planner->metrics_port()));
  for (const char* want :
       {"pipeplan_plan_requests_total{code=\"OK\",method=\"Plan\"} 1",
        "pipeplan_plan_requests_total{code=\"NOT_FOUND\",method=\"GetJob\"} 1",
        "pipeplan_solve_duration_seconds_count 1", "pipeplan_solver_gap_ratio", "pipeplan_jobs 0",
        "pipeplan_workers{state=\"lost\"} 0", "pipeplan_build_info{version="}) {
    EXPECT_TRUE(absl::StrContains(m, want)) << want << "\n" << m;
  }
}

TEST(PlannerService, CliRemotePlanAndJobs) {
  auto planner = MustStart();
  ASSERT_NE(planner, nullptr);
  const std::string cli = PIPEPLAN_CLI_BIN;
  const std::vector<std::string> plan_flags = {"--graph",        DataPath("chain_small.json"),
                                               "--cluster",      DataPath("cluster_8xa100.json"),
                                               "--ranks",        "4",
                                               "--schedule",     "1F1B",
                                               "--microbatches", "8"};
  std::string out;
  std::vector<std::string> argv = {cli, "--planner", planner->address(), "plan"};
  argv.insert(argv.end(), plan_flags.begin(), plan_flags.end());
  ASSERT_EQ(RunCommand(argv, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "planned by " + planner->address())) << out;
  EXPECT_TRUE(absl::StrContains(out, "<- bottleneck")) << out;

  argv = {cli, "--planner", planner->address(), "jobs", "create", "--name", "cli-job"};
  argv.insert(argv.end(), plan_flags.begin(), plan_flags.end());
  argv.push_back("--json");
  ASSERT_EQ(RunCommand(argv, &out), 0) << out;
  v1::Job created;
  ASSERT_TRUE(ParseJson(out, &created).ok()) << out;
  EXPECT_EQ(created.plan_version(), 1);
  EXPECT_EQ(created.name(), "cli-job");

  ASSERT_EQ(RunCommand({cli, "--planner", planner->address(), "jobs", "list"}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, created.id())) << out;

  ASSERT_EQ(
      RunCommand({cli, "--planner", planner->address(), "jobs", "show", created.id(), "--json"},
                 &out),
      0)
      << out;
  v1::Job shown;
  ASSERT_TRUE(ParseJson(out, &shown).ok()) << out;
  EXPECT_EQ(shown.plan_version(), 1);
  EXPECT_EQ(shown.plan().stages_size(), 4);

  // jobs replan with one option flag: the other options stay; the schedule
  // prints as the user spells it.
  const std::string addr = planner->address();
  ASSERT_EQ(RunCommand({cli, "jobs", "replan", created.id(), "--planner", addr, "--ranks", "2",
                        "--reason", "two ranks"},
                       &out),
            0)
      << out;
  EXPECT_TRUE(absl::StrContains(out, "plan version 2 (two ranks)")) << out;
  EXPECT_TRUE(absl::StrContains(out, "schedule 1F1B, 8 microbatches")) << out;
  ASSERT_EQ(
      RunCommand({cli, "--planner", addr, "jobs", "versions", created.id(), "-o", "json"}, &out), 0)
      << out;
  EXPECT_TRUE(absl::StrContains(out, "\"version\": 1, \"ranks\": 4")) << out;
  EXPECT_TRUE(absl::StrContains(out, "\"version\": 2, \"ranks\": 2")) << out;
  EXPECT_TRUE(absl::StrContains(out, "\"schedule\": \"1F1B\"")) << out;
  EXPECT_TRUE(absl::StrContains(out, "\"reason\": \"two ranks\"")) << out;

  ASSERT_EQ(RunCommand({cli, "--planner", addr, "jobs", "cancel", created.id()}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "cancelled")) << out;
  ASSERT_EQ(RunCommand({cli, "--planner", addr, "jobs", "list"}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "cancelled")) << out;
  // A cancelled job gets no new versions: FAILED_PRECONDITION, exit 1.
  EXPECT_EQ(RunCommand({cli, "--planner", addr, "jobs", "replan", created.id()}, &out), 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "FAILED_PRECONDITION")) << out;

  ASSERT_EQ(RunCommand({cli, "--planner", addr, "jobs", "delete", created.id()}, &out), 0) << out;
  // Exit codes (docs/cli.md): 4 not found, 2 usage, 3 unavailable.
  EXPECT_EQ(RunCommand({cli, "--planner", addr, "jobs", "show", created.id()}, &out), 4);
  EXPECT_TRUE(absl::StrContains(out, "NOT_FOUND")) << out;
  EXPECT_EQ(RunCommand({cli, "jobs", "list"}, &out), 2);
  EXPECT_TRUE(absl::StrContains(out, "--planner")) << out;
  EXPECT_EQ(RunCommand({cli, "--planner", "127.0.0.1:1", "--timeout", "5", "jobs", "list"}, &out),
            3)
      << out;
  EXPECT_TRUE(absl::StrContains(out, "UNAVAILABLE")) << out;
}

}  // namespace
}  // namespace pipeplan::testing
