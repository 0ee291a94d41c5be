// The user's model trained through a plan, end to end: a real planner and
// two or four `pipeplan-worker --executor torch` processes over Gloo on 127.0.0.1,
// the job created with the CLI's training flags, the per-step losses read
// back with `jobs reports --json` and compared with the single-process
// reference trainer (pipeplan_reference_train.py) on the same package, data
// and optimizer — across a replan that moves stages, across a kill of every
// worker followed by a restart from the newest checkpoint, and with four
// workers running two data-parallel replicas of a two-rank pipeline (planned
// so from the start, or reached by a replan from one replica).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pipeplan/convert/proto_convert.h"
#include "planner_process.h"
#include "worker_process.h"

namespace pipeplan::testing {
namespace {

constexpr char kPython[] = PIPEPLAN_DEFAULT_PYTHON;

std::string Source(const std::string& path) {
  return std::string(PIPEPLAN_SOURCE_DIR) + "/" + path;
}

// step -> loss, from `jobs reports --json` or the reference's losses.json.
std::map<int64_t, double> Losses(const std::string& json) {
  std::map<int64_t, double> out;
  static const std::regex kEntry(R"re("step":\s*(\d+)[^}]*?"loss":\s*(-?[0-9.eE+-]+))re");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), kEntry);
       it != std::sregex_iterator(); ++it) {
    out[std::stoll((*it)[1])] = std::stod((*it)[2]);
  }
  return out;
}

// How a job is planned: ranks (2: cluster.json, 4: cluster4.json), schedule.
struct Shape {
  int ranks = 2;
  std::string schedule = "1F1B";
  int chunks_per_rank = 1;
  // Empty: two devices, or four for four ranks.
  std::string cluster;
  std::string batch = "8";
};

class TrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string out;
    ASSERT_EQ(RunCommand({kPython, Source("tests/models/make_fixtures.py"), "--out-dir",
                          dir_.path(), "--model", "gpt", "--model", "cnn", "--rows", "48"},
                         &out, absl::Seconds(300)),
              0)
        << out;
    std::ofstream(dir_.path() + "/cluster.json")
        << R"({"devices": [{"id": "cpu0", "host": "h0", "flops": 1e12, "memory_bytes": 8e9},
                          {"id": "cpu1", "host": "h0", "flops": 1e12, "memory_bytes": 8e9}]})";
    std::ofstream(dir_.path() + "/cluster4.json")
        << R"({"devices": [{"id": "cpu0", "host": "h0", "flops": 1e12, "memory_bytes": 8e9},
                          {"id": "cpu1", "host": "h0", "flops": 1e12, "memory_bytes": 8e9},
                          {"id": "cpu2", "host": "h0", "flops": 1e12, "memory_bytes": 8e9},
                          {"id": "cpu3", "host": "h0", "flops": 1e12, "memory_bytes": 8e9}]})";
    auto planner = PlannerProcess::Start({"--replan=off"});
    ASSERT_TRUE(planner.ok()) << planner.status();
    planner_ = *std::move(planner);
    auto client = planner_->Client();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // `jobs create` with the training flags; returns the job id.
  std::string CreateJob(const std::string& model, const std::string& data,
                        const std::vector<std::string>& extra, std::string* out,
                        const Shape& shape = Shape()) {
    std::vector<std::string> argv = {
        PIPEPLAN_CLI_BIN,
        "--planner",
        planner_->address(),
        "jobs",
        "create",
        "--graph",
        Path(model + ".json"),
        "--cluster",
        Path(shape.cluster.empty() ? (shape.ranks == 4 ? "cluster4.json" : "cluster.json")
                                   : shape.cluster),
        "--ranks",
        absl::StrCat(shape.ranks),
        "--schedule",
        shape.schedule,
        "--chunks-per-rank",
        absl::StrCat(shape.chunks_per_rank),
        "--microbatches",
        "4",
        "--method",
        "dp",
        "--model-package",
        Path(model + ".ptpkg"),
        "--data",
        "tensors:" + Path(data),
        "--batch-size",
        shape.batch,
        "--optimizer",
        "adamw",
        "--lr",
        "1e-3",
        "--json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (RunCommand(argv, out, absl::Seconds(120)) != 0) return "";
    v1::Job job;
    if (!ParseJson(*out, &job).ok()) return "";
    return job.id();
  }

  std::unique_ptr<WorkerProcess> StartWorker(const std::string& job, int r,
                                             const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args =
        WorkerArgs(planner_->address(), job, absl::StrCat("w", r), absl::StrCat("cpu", r));
    args.insert(args.end(), extra.begin(), extra.end());
    for (const char* a : {"--executor", "torch", "--stage-cache"}) args.push_back(a);
    args.push_back(Path("stage-cache"));
    return std::make_unique<WorkerProcess>(dir_.path(), absl::StrCat("w", r, "-", ++started_),
                                           args);
  }

  std::map<int64_t, double> Reported(const std::string& job) {
    std::string out;
    RunCommand(
        {PIPEPLAN_CLI_BIN, "--planner", planner_->address(), "jobs", "reports", job, "--json"},
        &out);
    return Losses(out);
  }

  // Waits until `count` steps of plan version `version` were reported.
  bool WaitForStepsAtVersion(const std::string& job, int64_t version, int count) {
    const std::regex entry(absl::StrCat(R"re("plan_version":\s*)re", version, R"re(\b)re"));
    const absl::Time deadline = absl::Now() + absl::Seconds(180);
    while (absl::Now() < deadline) {
      std::string out;
      RunCommand(
          {PIPEPLAN_CLI_BIN, "--planner", planner_->address(), "jobs", "reports", job, "--json"},
          &out);
      if (std::distance(std::sregex_iterator(out.begin(), out.end(), entry),
                        std::sregex_iterator()) >= count) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
    return false;
  }

  // The worker's /metrics (it was started with --metrics-listen).
  static std::string ScrapeWorker(const WorkerProcess& w) {
    const std::string o = w.Output();
    const size_t at = o.find("metrics on ");
    if (at == std::string::npos) return "";
    const std::string address = o.substr(at + 11, o.find('\n', at) - at - 11);
    absl::StatusOr<std::string> scraped =
        ScrapeMetrics(std::stoi(address.substr(address.rfind(':') + 1)));
    return scraped.ok() ? *scraped : scraped.status().ToString();
  }

  // The value of the first sample whose line starts with `prefix` (-1: none).
  static double MetricValue(const std::string& metrics, const std::string& prefix) {
    size_t at = metrics.find("\n" + prefix);
    if (at == std::string::npos) return -1;
    const size_t end = metrics.find('\n', at + 1);
    const std::string line = metrics.substr(at + 1, end - at - 1);
    return std::stod(line.substr(line.rfind(' ') + 1));
  }

  // Losses of the single-process reference over `steps` steps.
  std::map<int64_t, double> Reference(const std::string& model, int steps,
                                      const std::string& dtype = "float32",
                                      const std::string& batch = "8",
                                      const std::string& device = "cpu") {
    std::string out;
    const std::string losses =
        Path(model + "_" + dtype + "_" + batch + "_" + device + "_reference.json");
    EXPECT_EQ(RunCommand({kPython,          Source("client/python/pipeplan_reference_train.py"),
                          "--package",      Path(model + ".ptpkg"),
                          "--data",         "tensors:" + Path(model + "_data.pt"),
                          "--optimizer",    "adamw",
                          "--lr",           "1e-3",
                          "--batch-size",   batch,
                          "--microbatches", "4",
                          "--steps",        absl::StrCat(steps),
                          "--dtype",        dtype,
                          "--device",       device,
                          "--out",          losses},
                         &out, absl::Seconds(300)),
              0)
        << out;
    std::ifstream in(losses);
    return Losses(std::string(std::istreambuf_iterator<char>(in), {}));
  }

  // Waits until some report reaches `step` (or the time runs out).
  bool WaitForStep(const std::string& job, int64_t step) {
    const absl::Time deadline = absl::Now() + absl::Seconds(180);
    while (absl::Now() < deadline) {
      auto losses = Reported(job);
      if (!losses.empty() && losses.rbegin()->first >= step) return true;
      absl::SleepFor(absl::Milliseconds(200));
    }
    return false;
  }

  static void ExpectMatch(const std::map<int64_t, double>& got,
                          const std::map<int64_t, double>& want, int64_t first, int64_t last,
                          double relative = 1e-4) {
    for (int64_t s = first; s <= last; ++s) {
      ASSERT_TRUE(got.count(s)) << "no loss reported for step " << s << " of " << got.size();
      ASSERT_TRUE(want.count(s)) << "no reference loss for step " << s;
      EXPECT_NEAR(got.at(s), want.at(s), relative * std::abs(want.at(s))) << "step " << s;
    }
  }

  // Trains `model` for 30 steps on four workers planned as `shape`, in
  // `dtype`, and compares every step's loss with the single-process
  // reference within `relative`.
  void TrainOnFourWorkers(const std::string& model, const Shape& shape, const std::string& dtype,
                          double relative) {
    constexpr int kSteps = 30;
    std::string out;
    const std::string job =
        CreateJob(model, model + "_data.pt",
                  {"--max-steps", absl::StrCat(kSteps), "--dtype", dtype}, &out, shape);
    ASSERT_FALSE(job.empty()) << out;
    std::vector<std::unique_ptr<WorkerProcess>> workers;
    for (int r = 0; r < 4; ++r) workers.push_back(StartWorker(job, r));
    for (auto& w : workers) EXPECT_EQ(w->Wait(absl::Seconds(240)), 0) << w->Output();
    // Every rank ran the planned schedule over four ranks.
    EXPECT_NE(workers[0]->Output().find(
                  absl::StrCat("ranks=4 replicas=1 stages=", 4 * shape.chunks_per_rank)),
              std::string::npos)
        << workers[0]->Output();
    ExpectMatch(Reported(job), Reference(model, kSteps, dtype), 0, kSteps - 1, relative);
    ExpectExecutorFacts(job);
    auto state = client_->GetJob(job);
    ASSERT_TRUE(state.ok());
    EXPECT_EQ(state->state(), v1::JOB_COMPLETED) << state->failure_message();
  }

  // What the torch executor tells the planner about how it computes: the
  // CPU pool its computes share when they run on the CPU, that its W runs
  // the backward again (docs/observability.md, "CPU workers share cores")
  // and, on the CPU, the all-reduce probe.
  void ExpectExecutorFacts(const std::string& job) {
    auto reports = client_->ListStepReports(job, 10'000);
    ASSERT_TRUE(reports.ok()) << reports.status();
    ASSERT_GT(reports->reports_size(), 0);
    const bool on_cpu = !PythonSeesCuda();
    for (const v1::ReportStepRequest& r : reports->reports()) {
      EXPECT_TRUE(r.weight_pass_repeats_backward()) << r.worker_id();
      if (!on_cpu) continue;
      ASSERT_TRUE(r.has_cpu_use()) << r.worker_id();
      EXPECT_GE(r.cpu_use().threads(), 1);
      EXPECT_GE(r.cpu_use().cpus(), 1);
      EXPECT_EQ(r.cpu_use().pool(), reports->reports(0).cpu_use().pool());
      // Four ranks over Gloo: every report carries the version's probe of
      // their ring (transport/allreduce_probe.h; 4 MiB by default).
      ASSERT_TRUE(r.has_allreduce_probe_seconds()) << r.worker_id();
      EXPECT_GT(r.allreduce_probe_seconds(), 0);
      EXPECT_EQ(r.allreduce_probe_bytes(), 4 << 20);
    }
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  // Whether the Python with torch sees a CUDA device (on a GPU node its
  // wheel also gives the worker its LibTorch, so both see the same GPUs).
  static bool PythonSeesCuda() {
    std::string out;
    return RunCommand({kPython, "-c",
                       "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"},
                      &out, absl::Seconds(120)) == 0;
  }

  TempDir dir_;
  std::unique_ptr<PlannerProcess> planner_;
  std::unique_ptr<client::PlannerClient> client_;
  int started_ = 0;
};

// Version 2 is published while version 1 trains: its stages compile in the
// background, training goes on under version 1 meanwhile, and the switch
// moves parameters and AdamW state. The workers stop (SIGTERM) some steps
// after the switch, however fast this machine compiles and trains.
TEST_F(TrainingTest, TwoWorkersMatchSingleProcessAcrossAReplan) {
  std::string out;
  const std::string job = CreateJob("gpt", "gpt_data.pt", {"--max-steps", "3000"}, &out);
  ASSERT_FALSE(job.empty()) << out;
  auto w0 = StartWorker(job, 0);
  auto w1 = StartWorker(job, 1, {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(WaitForStep(job, 2)) << w0->Output() << w1->Output();

  // Version 2 splits the model elsewhere: parameters and AdamW state move.
  v1::ReplanJobRequest replan;
  replan.set_job_id(job);
  replan.mutable_options()->set_num_ranks(2);
  replan.mutable_options()->set_microbatches(4);
  replan.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  replan.mutable_options()->set_method(v1::METHOD_UNIFORM);
  auto v2 = client_->ReplanJob(replan);
  ASSERT_TRUE(v2.ok()) << v2.status();
  auto v1plan = client_->GetPlan(job, 1);
  ASSERT_TRUE(v1plan.ok());
  const std::vector<int> before(v1plan->plan().node_stage().begin(),
                                v1plan->plan().node_stage().end());
  const std::vector<int> after(v2->plan().node_stage().begin(), v2->plan().node_stage().end());
  ASSERT_NE(before, after) << "the replan must move nodes";
  ASSERT_TRUE(WaitForStepsAtVersion(job, 2, 10)) << w0->Output() << w1->Output();

  // The last stage's worker exports the loss, samples/s and both switches'
  // compile and pause times (the start counts as a switch from version 0).
  const std::string metrics = ScrapeWorker(*w1);
  for (const char* name :
       {"pipeplan_worker_loss{", "pipeplan_worker_samples_per_second{",
        "pipeplan_worker_stage_compile_seconds_count{", "pipeplan_worker_switch_seconds_count{"}) {
    EXPECT_GT(MetricValue(metrics, name), 0) << name << " in\n" << metrics;
  }
  EXPECT_EQ(MetricValue(metrics, "pipeplan_worker_stage_compile_seconds_count{"), 2) << metrics;
  EXPECT_EQ(MetricValue(metrics, "pipeplan_worker_switch_seconds_count{"), 2) << metrics;

  // Stop the whole job: both workers leave at a step boundary.
  w0->Signal(SIGTERM);
  w1->Signal(SIGTERM);
  EXPECT_EQ(w0->Wait(absl::Seconds(60)), 0) << w0->Output();
  EXPECT_EQ(w1->Wait(absl::Seconds(60)), 0) << w1->Output();
  for (WorkerProcess* w : {w0.get(), w1.get()}) {
    // Version 2 compiled while version 1 kept training: a step of version 1
    // lies between the compile's start and the switch.
    const std::string o = w->Output();
    const size_t compile = o.find("event=stage_compile_start job=" + job);
    const size_t step_v1 = o.find("plan_version=1 rank=", compile);
    const size_t sw = o.find("event=plan_switch job=" + job);
    const size_t switch_v2 = o.find("from_version=1 plan_version=2", sw);
    ASSERT_NE(compile, std::string::npos) << o;
    ASSERT_NE(switch_v2, std::string::npos) << o;
    EXPECT_LT(step_v1, switch_v2) << o;
    EXPECT_EQ(w->Values("plan_switch", "compile_seconds").size(), 2u) << o;
  }

  const auto got = Reported(job);
  ASSERT_FALSE(got.empty());
  const int64_t last = got.rbegin()->first;
  ExpectMatch(got, Reference("gpt", static_cast<int>(last + 1)), 0, last);
  if (HasFailure()) ADD_FAILURE() << w0->Output() << w1->Output();
}

TEST_F(TrainingTest, KilledWorkersResumeFromTheNewestCheckpoint) {
  std::string out;
  constexpr int kSteps = 300, kEvery = 20;
  const std::string job = CreateJob("cnn", "cnn_data.pt",
                                    {"--max-steps", absl::StrCat(kSteps), "--checkpoint-dir",
                                     Path("ckpt"), "--checkpoint-every", absl::StrCat(kEvery)},
                                    &out);
  ASSERT_FALSE(job.empty()) << out;
  {
    auto w0 = StartWorker(job, 0);
    auto w1 = StartWorker(job, 1);
    ASSERT_TRUE(WaitForStep(job, kEvery + 5)) << w0->Output() << w1->Output();
    w0->Signal(SIGKILL);
    w1->Signal(SIGKILL);
    w0->Wait(absl::Seconds(10));
    w1->Wait(absl::Seconds(10));
  }
  auto w0 = StartWorker(job, 0);
  auto w1 = StartWorker(job, 1);
  EXPECT_EQ(w0->Wait(absl::Seconds(240)), 0) << w0->Output();
  EXPECT_EQ(w1->Wait(absl::Seconds(60)), 0) << w1->Output();
  // The restarted workers began at a checkpoint's step, not at 0.
  const std::vector<std::string> steps = w0->Values("step", "step");
  ASSERT_FALSE(steps.empty()) << w0->Output();
  const int first = std::stoi(steps.front());
  EXPECT_GT(first, 0) << w0->Output();
  EXPECT_EQ(first % kEvery, 0) << w0->Output();
  ExpectMatch(Reported(job), Reference("cnn", kSteps), 0, kSteps - 1);
}

// Two replicas of a two-rank pipeline on four worker processes: each
// replica trains half of every batch of 16 rows, the gradients are averaged
// over the replicas, and the losses are one process's on the whole batch.
TEST_F(TrainingTest, FourWorkersRunTwoReplicasAsOneProcess) {
  std::string out;
  constexpr int kSteps = 40;
  const std::string job =
      CreateJob("gpt", "gpt_data.pt", {"--replicas", "2", "--max-steps", absl::StrCat(kSteps)},
                &out, {.cluster = "cluster4.json", .batch = "16"});
  ASSERT_FALSE(job.empty()) << out;
  auto plan = client_->GetPlan(job, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->plan().replicas_size(), 2) << out;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int r = 0; r < 4; ++r) workers.push_back(StartWorker(job, r));
  for (auto& w : workers) EXPECT_EQ(w->Wait(absl::Seconds(240)), 0) << w->Output();
  // Every device ran a stage, and both replicas' last ranks report a loss.
  int replica_one = 0;
  for (auto& w : workers) {
    EXPECT_NE(w->Output().find("event=step"), std::string::npos) << w->Output();
    replica_one += w->Output().find("replica=1") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(replica_one, 2);
  ExpectMatch(Reported(job), Reference("gpt", kSteps, "float32", "16"), 0, kSteps - 1);
  if (HasFailure()) {
    for (auto& w : workers) ADD_FAILURE() << w->Output();
  }
  auto state = client_->GetJob(job);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->state(), v1::JOB_COMPLETED) << state->failure_message();
}

// A replan from one pipeline to two replicas of it mid-run: the two idle
// workers join, every holder of a stage in both replicas gets the
// parameters and AdamW state, and the losses go on as one process's.
TEST_F(TrainingTest, ReplanFromOneReplicaToTwoKeepsTheLosses) {
  std::string out;
  // Long enough that version 2 compiles in the background (about 10 s
  // here) and switches before the end: if the old version reached
  // max_steps first, the two workers waiting on version 2 would wait on.
  constexpr int kSteps = 300;
  const std::string job =
      CreateJob("gpt", "gpt_data.pt",
                {"--replicas", "1", "--max-steps", absl::StrCat(kSteps), "--dtype", "float64"},
                &out, {.cluster = "cluster4.json", .batch = "16"});
  ASSERT_FALSE(job.empty()) << out;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int r = 0; r < 4; ++r) workers.push_back(StartWorker(job, r));
  ASSERT_TRUE(WaitForStep(job, 2));
  v1::ReplanJobRequest replan;
  replan.set_job_id(job);
  replan.mutable_options()->set_num_ranks(2);
  replan.mutable_options()->set_num_replicas(2);
  replan.mutable_options()->set_microbatches(4);
  replan.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  replan.mutable_options()->set_method(v1::METHOD_DP);
  auto v2 = client_->ReplanJob(replan);
  ASSERT_TRUE(v2.ok()) << v2.status();
  ASSERT_EQ(v2->plan().replicas_size(), 2);
  for (auto& w : workers) EXPECT_EQ(w->Wait(absl::Seconds(240)), 0) << w->Output();
  const auto got = Reported(job);
  // float64: over hundreds of steps float32 drifts by ~1e-4 between two
  // summation orders (replicas average what one process sums); float64
  // shows the state moved exactly.
  ExpectMatch(got, Reference("gpt", kSteps, "float64", "16"), 0, kSteps - 1, 1e-9);
  // The switch to version 2 (the last plan_switch) came mid-run.
  int64_t switched_at = -1;
  for (auto& w : workers) {
    for (const std::string& step : w->Values("plan_switch", "step")) {
      switched_at = std::max<int64_t>(switched_at, std::stoll(step));
    }
  }
  EXPECT_GT(switched_at, 0);
  EXPECT_LT(switched_at, kSteps);
  if (HasFailure()) {
    for (auto& w : workers) ADD_FAILURE() << w->Output();
  }
}

// Four workers, two chunks per rank: the gpt's eight stages (its tied
// embedding on the first and last) under Interleaved 1F1B.
TEST_F(TrainingTest, FourWorkersInterleaved1F1BMatchSingleProcess) {
  TrainOnFourWorkers("gpt", {.ranks = 4, .schedule = "Interleaved1F1B", .chunks_per_rank = 2},
                     "float32", 1e-4);
}

// ZB-H1 (zero bubble, one chunk per rank): split I/W backward on the cnn.
TEST_F(TrainingTest, FourWorkersZeroBubbleMatchSingleProcess) {
  TrainOnFourWorkers("cnn", {.ranks = 4, .schedule = "InterleavedZeroBubble"}, "float32", 1e-4);
}

// In float64 the pipelined run and the reference differ only by the order
// of a few sums: a tolerance float32 could never meet.
TEST_F(TrainingTest, FourWorkersInFloat64MatchSingleProcessClosely) {
  TrainOnFourWorkers("gpt", {.ranks = 4, .schedule = "1F1B"}, "float64", 1e-9);
}

TEST_F(TrainingTest, BadInputsFailAtCreateOrFailTheJob) {
  // A package of another model: refused at `jobs create`, naming the package.
  std::string out;
  std::vector<std::string> argv = {PIPEPLAN_CLI_BIN,
                                   "--planner",
                                   planner_->address(),
                                   "jobs",
                                   "create",
                                   "--graph",
                                   Path("gpt.json"),
                                   "--cluster",
                                   Path("cluster.json"),
                                   "--ranks",
                                   "2",
                                   "--model-package",
                                   Path("cnn.ptpkg"),
                                   "--data",
                                   "tensors:" + Path("gpt_data.pt"),
                                   "--batch-size",
                                   "8"};
  EXPECT_NE(RunCommand(argv, &out), 0);
  EXPECT_NE(out.find("model package"), std::string::npos) << out;

  // Data of another model: the worker fails the job with the reason and
  // exits 5; a restarted worker does not crash-loop.
  const std::string job = CreateJob("gpt", "cnn_data.pt", {"--max-steps", "3"}, &out);
  ASSERT_FALSE(job.empty()) << out;
  auto w0 = StartWorker(job, 0);
  auto w1 = StartWorker(job, 1);
  EXPECT_EQ(w0->Wait(absl::Seconds(180)), 5) << w0->Output();
  w1->Wait(absl::Seconds(60));
  auto state = client_->GetJob(job);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->state(), v1::JOB_FAILED);
  EXPECT_NE(state->failure_message().find("data"), std::string::npos) << state->failure_message();
  auto again = StartWorker(job, 0);
  EXPECT_EQ(again->Wait(absl::Seconds(60)), 5) << again->Output();
  EXPECT_NE(again->Output().find("has failed"), std::string::npos) << again->Output();
}

}  // namespace
}  // namespace pipeplan::testing

namespace pipeplan::testing {
namespace {

// The `gpu` label's (pipeplan_add_test GPU "*OnTheGpu*"): skips, before
// building the fixtures, where the Python with torch sees no CUDA device.
// PIPEPLAN_GPU_TEST_DEVICE=cpu runs the same test on the CPU, so that the
// test itself is tried where no GPU is (scripts/gpu_check.sh --cpu).
class TrainingOnTheGpuTest : public TrainingTest {
 protected:
  static std::string Device() {
    const char* device = std::getenv("PIPEPLAN_GPU_TEST_DEVICE");
    return device != nullptr && *device != '\0' ? device : "cuda:0";
  }
  void SetUp() override {
    if (Device() != "cpu" && !PythonSeesCuda()) {
      GTEST_SKIP() << "needs CUDA: " << kPython << " sees no CUDA device";
    }
    TrainingTest::SetUp();
  }
};

// Two workers share cuda:0. NCCL refuses two ranks on one GPU ("Duplicate
// GPU"), so --transport auto must see the same device UUID on both and pick
// Gloo staging through pinned host memory by itself. With deterministic
// algorithms on both sides, the 100 steps' losses equal one-process PyTorch
// on the same GPU within 1e-3.
TEST_F(TrainingOnTheGpuTest, TwoWorkersSharingCuda0MatchOneProcess) {
  constexpr int kSteps = 100;
  std::string out;
  const std::string job =
      CreateJob("gpt", "gpt_data.pt", {"--max-steps", absl::StrCat(kSteps)}, &out);
  ASSERT_FALSE(job.empty()) << out;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int r = 0; r < 2; ++r) {
    workers.push_back(StartWorker(
        job, r, {"--torch-device", Device(), "--transport", "auto", "--deterministic"}));
  }
  for (auto& w : workers) ASSERT_EQ(w->Wait(absl::Seconds(300)), 0) << w->Output();
  ExpectMatch(Reported(job), Reference("gpt", kSteps, "float32", "8", Device()), 0, kSteps - 1,
              1e-3);
}

}  // namespace
}  // namespace pipeplan::testing
