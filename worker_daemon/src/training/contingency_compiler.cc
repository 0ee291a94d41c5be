#include "contingency_compiler.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace pipeplan::worker {

ContingencyCompiler::ContingencyCompiler(Hooks hooks, Options options)
    : hooks_(std::move(hooks)), options_(options), thread_([this] { Loop(); }) {}

ContingencyCompiler::~ContingencyCompiler() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  cancel_.store(true);
  thread_.join();
}

void ContingencyCompiler::SetRunning(int64_t version) {
  absl::MutexLock l(&mu_);
  running_ = version;
}

std::set<std::string> ContingencyCompiler::Compiled() const {
  absl::MutexLock l(&mu_);
  return compiled_;
}

int64_t ContingencyCompiler::Running() const {
  absl::MutexLock l(&mu_);
  return running_;
}

void ContingencyCompiler::Sleep(absl::Duration d, int64_t version) {
  absl::MutexLock l(&mu_);
  auto wake = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || running_ != version; };
  mu_.AwaitWithTimeout(absl::Condition(&wake), d);
}

void ContingencyCompiler::Loop() {
  int64_t version = 0;
  while (!cancel_.load()) {
    if (version > 0 && !hooks_.busy()) Refresh(version);
    Sleep(options_.poll, version);
    version = Running();
  }
}

void ContingencyCompiler::Refresh(int64_t version) {
  if (!base_ || base_->version() != version) {
    absl::StatusOr<v1::VersionedPlan> full = hooks_.get_plan(version);
    if (!full.ok()) return;
    base_ = *std::move(full);
    generation_ = 0;
    if (CompileContingencies(version, base_->contingencies())) {
      generation_ = base_->contingency_generation();
    }
    return;
  }
  absl::StatusOr<v1::VersionedPlan> light = hooks_.get_contingencies(version, generation_);
  if (!light.ok() || light->contingency_generation() == generation_) return;
  // Only a round that compiled every plan takes the generation: an
  // interrupted one asks for the same plans again.
  if (CompileContingencies(version, light->contingencies())) {
    generation_ = light->contingency_generation();
  }
}

bool ContingencyCompiler::CompileContingencies(
    int64_t version, const google::protobuf::RepeatedPtrField<v1::ContingencyPlan>& plans) {
  for (const v1::ContingencyPlan& c : plans) {
    // The live version comes first: a switch (or a loss) stops the round.
    if (cancel_.load() || hooks_.busy() || Running() != version) return false;
    absl::StatusOr<StagePlan> plan = StagePlanFromProto(
        c.plan(), version, &base_->request().graph(), &base_->request().cluster());
    if (!plan.ok()) continue;
    absl::StatusOr<StageCompileRequest> r = hooks_.request(*plan);
    if (!r.ok()) continue;
    const std::string dir = CompiledStagesDir(*r);
    {
      absl::MutexLock l(&mu_);
      if (compiled_.contains(dir)) continue;
    }
    const bool cached = std::filesystem::exists(dir + "/stages.json");
    r->cancel = &cancel_;
    r->niceness = options_.niceness;
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> out = CompileStages(*r);
    hooks_.emit(absl::StrCat("event=contingency_compiled plan_version=", version, " lost=",
                             absl::StrJoin(c.lost_devices(), ","), " cached=", cached ? 1 : 0,
                             " seconds=", absl::ToDoubleSeconds(absl::Now() - start),
                             " status=", absl::StatusCodeToString(out.status().code())));
    if (out.ok()) {
      absl::MutexLock l(&mu_);
      compiled_.insert(*out);
    }
  }
  return true;
}

}  // namespace pipeplan::worker
