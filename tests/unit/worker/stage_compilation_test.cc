// Stage compilation for the torch executor. CompileQueue: jobs run on its
// thread, newest version first; an older version still queued is dropped,
// and the destructor cancels a running job. The stage cache key: stages
// compiled by one version of the compiler are never reused by another (a
// cache written before dropout was seeded drew unseeded masks), while the
// same compiler and plan hit the same folder. Workers of one host that
// compile the same split at once run one compiler between them. The
// running version's contingency plans are compiled ahead, niced, only
// while the live compile is idle (issue 26).
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"
#include "training/compile_queue.h"
#include "training/contingency_compiler.h"
#include "training/stage_compiler.h"

namespace pipeplan::worker {
namespace {

TEST(CompileQueueTest, RunsAJobAndKeepsItsResult) {
  CompileQueue queue;
  EXPECT_FALSE(queue.Done(1));
  EXPECT_FALSE(queue.Wait(1).has_value());  // never queued
  EXPECT_TRUE(queue.Start(1, [](const std::atomic<bool>&) { return std::string("dir-1"); }));
  EXPECT_FALSE(queue.Start(1, [](const std::atomic<bool>&) { return std::string("again"); }));
  std::optional<CompileQueue::Result> r = queue.Wait(1);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->dir.ok());
  EXPECT_EQ(*r->dir, "dir-1");
  EXPECT_GE(r->seconds, 0);
  EXPECT_TRUE(queue.Done(1));
}

TEST(CompileQueueTest, DropsAnOlderVersionStillQueued) {
  CompileQueue queue;
  absl::Notification running, release;
  // Version 1 runs and blocks; 2 waits behind it; 3 arrives and drops 2.
  queue.Start(1, [&](const std::atomic<bool>&) -> absl::StatusOr<std::string> {
    running.Notify();
    release.WaitForNotification();
    return std::string("dir-1");
  });
  running.WaitForNotification();
  queue.Start(2, [](const std::atomic<bool>&) { return std::string("dir-2"); });
  queue.Start(3, [](const std::atomic<bool>&) { return std::string("dir-3"); });
  EXPECT_FALSE(queue.Wait(2).has_value());  // dropped unrun: the caller compiles itself
  release.Notify();
  ASSERT_TRUE(queue.Wait(3).has_value());
  EXPECT_EQ(*queue.Wait(3)->dir, "dir-3");
  EXPECT_EQ(*queue.Wait(1)->dir, "dir-1");
  EXPECT_FALSE(queue.Done(2));
}

TEST(CompileQueueTest, ReportsAFailedJobAsDone) {
  CompileQueue queue;
  queue.Start(4, [](const std::atomic<bool>&) -> absl::StatusOr<std::string> {
    return absl::InvalidArgumentError("bad plan");
  });
  std::optional<CompileQueue::Result> r = queue.Wait(4);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(queue.Done(4));
}

TEST(CompileQueueTest, DestructionCancelsTheRunningJob) {
  std::atomic<bool> saw_cancel{false};
  absl::Notification started;
  {
    CompileQueue queue;
    queue.Start(1, [&](const std::atomic<bool>& cancel) -> absl::StatusOr<std::string> {
      started.Notify();
      const absl::Time deadline = absl::Now() + absl::Seconds(30);
      while (!cancel.load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
      saw_cancel = cancel.load();
      return absl::CancelledError("cancelled");
    });
    started.WaitForNotification();
  }
  EXPECT_TRUE(saw_cancel.load());
}

void Write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

int Lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

TEST(StageCompilerTest, CacheFolderChangesWithTheCompilersSources) {
  testing::TempDir dir;
  const std::filesystem::path root(dir.path());
  Write(root / "pipeplan_stage_compile.py", "print('compile')\n");
  Write(root / "pipeplan" / "rng.py", "SEEDED = False\n");
  Write(root / "pipeplan" / "export" / "trace.py", "X = 1\n");
  Write(root / "pipeplan" / "notes.txt", "not code\n");
  StageCompileRequest r{.script = (root / "pipeplan_stage_compile.py").string(),
                        .package_digest = "0123456789abcdef0123",
                        .node_stage = {0, 0, 1},
                        .microbatch_size = 4,
                        .cache_dir = "/cache"};
  const std::string before = CompiledStagesDir(r);
  EXPECT_EQ(CompiledStagesDir(r), before);  // stable: the same compiler hits
  EXPECT_EQ(before.rfind("/cache/0123456789abcdef-", 0), 0u) << before;

  Write(root / "pipeplan" / "notes.txt", "still not code\n");
  EXPECT_EQ(CompiledStagesDir(r), before);
  Write(root / "pipeplan" / "rng.py", "SEEDED = True\n");
  const std::string seeded = CompiledStagesDir(r);
  EXPECT_NE(seeded, before);
  Write(root / "pipeplan" / "export" / "trace.py", "X = 2\n");
  EXPECT_NE(CompiledStagesDir(r), seeded);
  const std::string traced = CompiledStagesDir(r);
  Write(root / "pipeplan_stage_compile.py", "print('compile v2')\n");
  EXPECT_NE(CompiledStagesDir(r), traced);

  StageCompileRequest other = r;
  other.node_stage = {0, 1, 1};
  EXPECT_NE(CompiledStagesDir(other), CompiledStagesDir(r));
}

// A compile of the split {0, 1, 1} whose compiler is a shell script in
// `root`: it skips to --out, runs `body`, then writes stages.json there.
StageCompileRequest ShellCompile(const std::filesystem::path& root, const std::string& body,
                                 std::vector<int> node_stage = {0, 1, 1}) {
  Write(root / "compile.sh",
        "while [ $# -gt 0 ]; do case \"$1\" in --out) out=\"$2\"; shift;; esac; shift; done\n" +
            body + "mkdir -p \"$out\" && echo '{}' > \"$out/stages.json\"\n");
  return StageCompileRequest{.python = "/bin/sh",
                             .script = (root / "compile.sh").string(),
                             .package_dir = root.string(),
                             .package_digest = "0123456789abcdef0123",
                             .node_stage = std::move(node_stage),
                             .microbatch_size = 2,
                             .cache_dir = (root / "cache").string(),
                             .timeout = absl::Seconds(60)};
}

// Three survivors of a loss compile the new split at once into one cache:
// one compiler runs (a shell script stands in for Python: it counts its
// runs, takes 300 ms and writes stages.json), the others wait for it and
// read its folder.
TEST(StageCompilerTest, WorkersCompilingOneSplitAtOnceRunOneCompiler) {
  testing::TempDir dir;
  const std::filesystem::path root(dir.path());
  const std::filesystem::path runs = root / "runs.txt";
  const StageCompileRequest r =
      ShellCompile(root, "echo run >> '" + runs.string() + "'\nsleep 0.3\n");
  std::vector<absl::StatusOr<std::string>> dirs(3, absl::UnknownError("not run"));
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w) workers.emplace_back([&, w] { dirs[w] = CompileStages(r); });
  for (std::thread& t : workers) t.join();
  for (const absl::StatusOr<std::string>& d : dirs) {
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, CompiledStagesDir(r));
  }
  EXPECT_EQ(Lines(runs), 1) << "one compiler for the three workers";
}

// A survivor's compile (normal priority) that finds its split locked by a
// compile ahead of need (nice 19) raises that compiler to its own priority
// instead of waiting on a process other work starves. Raising a priority
// needs CAP_SYS_NICE: root only.
TEST(StageCompilerTest, ALiveCompileRaisesTheNicedCompilerItWaitsFor) {
  if (geteuid() != 0) GTEST_SKIP() << "raising a priority needs root";
  testing::TempDir dir;
  const std::filesystem::path root(dir.path());
  StageCompileRequest ahead =
      ShellCompile(root, "sleep 2\nnice >> '" + (root / "nice.txt").string() + "'\n");
  ahead.niceness = 19;
  absl::StatusOr<std::string> background = absl::UnknownError("not run");
  std::thread t([&] { background = CompileStages(ahead); });
  const std::string pid_file = CompiledStagesDir(ahead) + ".pid";
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!std::filesystem::exists(pid_file) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  StageCompileRequest live = ahead;
  live.niceness = 0;
  absl::StatusOr<std::string> out = CompileStages(live);
  t.join();
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(background.ok()) << background.status();
  std::ifstream niceness(root / "nice.txt");
  std::string line;
  ASSERT_TRUE(std::getline(niceness, line));
  EXPECT_EQ(line, "0") << "the waited-for compiler kept nice 19";
  EXPECT_FALSE(std::filesystem::exists(pid_file));
}

// A 3-node graph's plan on `devices` (one stage each) with `node_stage`.
v1::ContingencyPlan Contingency(std::vector<std::string> lost, std::vector<std::string> devices,
                                std::vector<int> node_stage) {
  v1::ContingencyPlan c;
  for (const std::string& d : lost) c.add_lost_devices(d);
  v1::Plan* plan = c.mutable_plan();
  plan->set_schedule(v1::SCHEDULE_1F1B);
  plan->set_microbatches(2);
  for (size_t s = 0; s < devices.size(); ++s) {
    v1::Stage* st = plan->add_stages();
    st->set_index(static_cast<int>(s));
    st->set_device_id(devices[s]);
  }
  for (int s : node_stage) plan->add_node_stage(s);
  return c;
}

// Version 1 of a 3-node graph with three contingencies: two splits, one of
// them for two losses (the same stages, so compiled once).
v1::VersionedPlan WithContingencies() {
  v1::VersionedPlan vp;
  vp.set_version(1);
  for (const char* id : {"a", "b", "c"}) {
    vp.mutable_request()->mutable_graph()->add_nodes()->set_id(id);
  }
  *vp.add_contingencies() = Contingency({"gpu2"}, {"gpu0", "gpu1"}, {0, 0, 1});
  *vp.add_contingencies() = Contingency({"gpu1"}, {"gpu0", "gpu2"}, {0, 1, 1});
  *vp.add_contingencies() = Contingency({"gpu0"}, {"gpu1", "gpu2"}, {0, 0, 1});
  return vp;
}

// A compile request of a plan's split whose compiler is a shell script in
// `root`: it records each run in runs.txt and its niceness in nice.txt.
StageCompileRequest ScriptCompile(const std::filesystem::path& root, const StagePlan& plan) {
  std::vector<int> node_stage(3, -1);
  for (size_t s = 0; s < plan.stage_nodes.size(); ++s) {
    for (int n : plan.stage_nodes[s]) node_stage[n] = static_cast<int>(s);
  }
  return ShellCompile(root,
                      "echo run >> '" + (root / "runs.txt").string() + "'\nsleep 0.1\nnice >> '" +
                          (root / "nice.txt").string() + "'\n",
                      node_stage);
}

// Nothing compiles while the live compile is busy; then each split once,
// at nice 19, and the live version's compile of one of them (a loss
// published it) is a cache hit.
TEST(ContingencyCompilerTest, CompilesTheRunningVersionsContingenciesAheadAtLowPriority) {
  testing::TempDir dir;
  const std::filesystem::path root(dir.path());
  const v1::VersionedPlan vp = WithContingencies();
  std::atomic<bool> busy{true};
  ContingencyCompiler compiler(
      {.get_plan = [&](int64_t v) -> absl::StatusOr<v1::VersionedPlan> {
         if (v != 1) return absl::NotFoundError("no such version");
         return vp;
       },
       .get_contingencies = [&](int64_t, int64_t) -> absl::StatusOr<v1::VersionedPlan> {
         return vp;
       },
       .request = [&](const StagePlan& plan) -> absl::StatusOr<StageCompileRequest> {
         return ScriptCompile(root, plan);
       },
       .busy = [&] { return busy.load(); },
       .emit = [](const std::string&) {}},
      {.poll = absl::Milliseconds(20)});
  compiler.SetRunning(1);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(Lines(root / "runs.txt"), 0) << "compiled ahead while the live compile was busy";
  busy = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (compiler.Compiled().size() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(compiler.Compiled().size(), 2u);
  EXPECT_EQ(Lines(root / "runs.txt"), 2) << "one run per split";
  std::ifstream niceness(root / "nice.txt");
  for (std::string line; std::getline(niceness, line);) EXPECT_EQ(line, "19");
  absl::StatusOr<StagePlan> live = StagePlanFromProto(
      vp.contingencies(0).plan(), 2, &vp.request().graph(), &vp.request().cluster());
  ASSERT_TRUE(live.ok()) << live.status();
  absl::StatusOr<std::string> hit = CompileStages(ScriptCompile(root, *live));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_TRUE(compiler.Compiled().contains(*hit));
  EXPECT_EQ(Lines(root / "runs.txt"), 2);
}

// The planner as the compiler polls it: the whole version, then the
// contingencies' view, which carries plans only for a generation the caller
// does not hold.
class ContingencySource {
 public:
  explicit ContingencySource(v1::VersionedPlan vp) : vp_(std::move(vp)) {}
  absl::StatusOr<v1::VersionedPlan> Full(int64_t) {
    absl::MutexLock l(&mu_);
    ++full_;
    return vp_;
  }
  absl::StatusOr<v1::VersionedPlan> View(int64_t, int64_t known) {
    absl::MutexLock l(&mu_);
    v1::VersionedPlan out;
    out.set_version(vp_.version());
    out.set_contingency_generation(vp_.contingency_generation());
    if (known != vp_.contingency_generation()) {
      *out.mutable_contingencies() = vp_.contingencies();
      ++with_plans_;
    }
    return out;
  }
  void Refresh(const v1::ContingencyPlan& added, int64_t generation) {
    absl::MutexLock l(&mu_);
    *vp_.add_contingencies() = added;
    vp_.set_contingency_generation(generation);
  }
  int full() {
    absl::MutexLock l(&mu_);
    return full_;
  }
  int with_plans() {
    absl::MutexLock l(&mu_);
    return with_plans_;
  }

 private:
  absl::Mutex mu_;
  v1::VersionedPlan vp_ ABSL_GUARDED_BY(mu_);
  int full_ ABSL_GUARDED_BY(mu_) = 0;
  int with_plans_ ABSL_GUARDED_BY(mu_) = 0;
};

// The version is read whole once; later polls carry plans only when the
// planner refreshed them, and the refresh's new split is compiled.
TEST(ContingencyCompilerTest, PollsTheGenerationAndCompilesARefresh) {
  testing::TempDir dir;
  const std::filesystem::path root(dir.path());
  v1::VersionedPlan vp = WithContingencies();
  vp.mutable_contingencies()->DeleteSubrange(1, 2);  // one split at first
  vp.set_contingency_generation(7);
  ContingencySource source(vp);
  ContingencyCompiler compiler(
      {.get_plan = [&](int64_t v) { return source.Full(v); },
       .get_contingencies = [&](int64_t v, int64_t known) { return source.View(v, known); },
       .request = [&](const StagePlan& plan) -> absl::StatusOr<StageCompileRequest> {
         return ScriptCompile(root, plan);
       },
       .busy = [] { return false; },
       .emit = [](const std::string&) {}},
      {.poll = absl::Milliseconds(10)});
  compiler.SetRunning(1);
  auto await_compiled = [&](size_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (compiler.Compiled().size() < n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return compiler.Compiled().size();
  };
  ASSERT_EQ(await_compiled(1), 1u);
  absl::SleepFor(absl::Milliseconds(200));  // about 20 polls of an unchanged generation
  EXPECT_EQ(source.with_plans(), 0) << "an unchanged generation was sent again";
  source.Refresh(WithContingencies().contingencies(1), 8);
  ASSERT_EQ(await_compiled(2), 2u) << "the refreshed split was not compiled";
  EXPECT_EQ(source.full(), 1) << "the whole version was read more than once";
  EXPECT_EQ(source.with_plans(), 1);
  EXPECT_EQ(Lines(root / "runs.txt"), 2);
}

}  // namespace
}  // namespace pipeplan::worker
