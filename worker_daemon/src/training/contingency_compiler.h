// Compiling the stages of the running version's contingency plans ahead
// (issue 26, docs/elastic.md "Precompiled shrink plans"): the planner plans
// what it would publish if one device (or one host) of the running version
// were lost and hands those plans out with the version
// (VersionedPlan.contingencies). This thread fetches them and compiles
// their stages into the stage cache, so when a loss publishes one, the
// survivors' compile of it is a cache hit. It reads the running version
// whole once (its graph), then polls only the contingencies' generation
// (PLAN_VIEW_CONTINGENCIES): a few bytes a second until the planner
// refreshes them, and a refresh is compiled within a poll.
//
// It never stands in front of the live version's compile: it starts a
// compile only while the live work is idle (`Hooks::busy` false), runs the
// compiler at the lowest CPU priority (nice 19), and one host compiles each
// split once (the stage compiler's flock, stage_compiler.h). The hooks keep
// it free of the planner client and the torch session (unit-testable).
//
// Thread safety: every method may be called from any thread; the destructor
// cancels a compile in progress and joins the thread.
#ifndef PIPEPLAN_WORKER_SRC_CONTINGENCY_COMPILER_H_
#define PIPEPLAN_WORKER_SRC_CONTINGENCY_COMPILER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pipeplan/v1/planner_service.pb.h"
#include "pipeplan/worker/runtime/stage_plan.h"
#include "stage_compiler.h"

namespace pipeplan::worker {

class ContingencyCompiler {
 public:
  struct Hooks {
    // The whole version, with its contingencies (PlannerApi::GetPlan).
    std::function<absl::StatusOr<v1::VersionedPlan>(int64_t version)> get_plan;
    // Its contingencies only (PlannerApi::GetContingencies).
    std::function<absl::StatusOr<v1::VersionedPlan>(int64_t version, int64_t known_generation)>
        get_contingencies;
    // The compile request of a plan's stages (the session's own).
    std::function<absl::StatusOr<StageCompileRequest>(const StagePlan& plan)> request;
    // True while the live version's compile is queued or runs.
    std::function<bool()> busy;
    // One log line (event=...).
    std::function<void(const std::string& line)> emit;
  };
  struct Options {
    // How often the running version's contingencies are asked for (the
    // planner computes them once the version runs and refreshes them as
    // its calibration moves).
    absl::Duration poll = absl::Seconds(1);
    // CPU priority of the compiler process.
    int niceness = 19;
  };

  ContingencyCompiler(Hooks hooks, Options options);
  ~ContingencyCompiler();
  ContingencyCompiler(const ContingencyCompiler&) = delete;
  ContingencyCompiler& operator=(const ContingencyCompiler&) = delete;

  // The version the step loop trains on now; its contingencies are next.
  void SetRunning(int64_t version) ABSL_LOCKS_EXCLUDED(mu_);
  // Stage directories compiled (or found compiled) ahead so far.
  std::set<std::string> Compiled() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();
  // Fetches `version`'s contingencies when new (the whole version when it
  // is new) and compiles them.
  void Refresh(int64_t version);
  // Compiles the stages of `plans` not compiled yet; false when it stopped
  // early (the live version's compile, a switch).
  bool CompileContingencies(int64_t version,
                            const google::protobuf::RepeatedPtrField<v1::ContingencyPlan>& plans);
  // Waits `d`, or until stopped or the running version changes.
  void Sleep(absl::Duration d, int64_t version) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t Running() const ABSL_LOCKS_EXCLUDED(mu_);

  const Hooks hooks_;
  const Options options_;
  mutable absl::Mutex mu_;
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> compiled_ ABSL_GUARDED_BY(mu_);
  // The loop thread's own: the running version read whole (its graph), and
  // the generation of its contingencies compiled in full.
  std::optional<v1::VersionedPlan> base_;
  int64_t generation_ = 0;
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

}  // namespace pipeplan::worker

#endif  // PIPEPLAN_WORKER_SRC_CONTINGENCY_COMPILER_H_
