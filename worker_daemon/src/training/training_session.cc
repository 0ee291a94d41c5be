#include "pipeplan/worker/training/training_session.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compile_queue.h"
#include "contingency_compiler.h"
#include "peer_snapshots.h"
#include "pipeplan/client/model_package.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/env/event_log.h"
#include "pipeplan/worker/package/checkpoint.h"
#include "pipeplan/worker/package/state_transfer.h"
#include "pipeplan/worker/torch/torch_executor.h"
#include "stage_compiler.h"

namespace pipeplan::worker {
namespace {

// Codes of executor and compiler errors that no restart fixes: the package,
// the data or the plan do not fit, or the loss diverged.
bool TrainingErrorIsFinal(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
      return true;
    default:
      return false;
  }
}

absl::Status FinalIfTrainingError(absl::Status s) {
  return TrainingErrorIsFinal(s) ? JobFailure(std::move(s)) : s;
}

std::vector<int> NodeStage(const StagePlan& plan) {
  size_t n = 0;
  for (const auto& nodes : plan.stage_nodes) n += nodes.size();
  std::vector<int> node_stage(n, -1);
  for (int s = 0; s < static_cast<int>(plan.stage_nodes.size()); ++s) {
    for (int node : plan.stage_nodes[s]) node_stage[node] = s;
  }
  return node_stage;
}

// Where each parameter's state comes from at a switch to `plan`: the
// previous version's holders (`before`, by device) that are devices of
// `plan`, as ranks of its transport over all devices, lowest first (the
// lowest sends; replicas and tied copies hold the same state). A holder not
// in `plan` takes no part; a parameter without any holder left cannot move.
absl::StatusOr<ParameterOwners> SourcesIn(
    const StagePlan& plan, const std::map<std::string, std::vector<std::string>>& before) {
  ParameterOwners from;
  for (const auto& [name, devices] : before) {
    std::vector<int>& ranks = from[name];
    for (const std::string& device : devices) {
      const int r = plan.RankOf(device);
      if (r >= 0) ranks.push_back(plan.WorldRank(plan.ReplicaOf(device), r));
    }
    if (ranks.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "state \"", name, "\" is held only by devices without a rank in plan version ",
          plan.version, "; restart the job's workers to resume from a checkpoint"));
    }
    std::sort(ranks.begin(), ranks.end());
  }
  return from;
}

// `owners` (ranks of one replica) as ranks of the plan's transport over all
// devices: every replica holds them.
ParameterOwners InEveryReplica(const StagePlan& plan, const ParameterOwners& owners) {
  ParameterOwners out;
  for (const auto& [name, ranks] : owners) {
    for (int q = 0; q < plan.num_replicas; ++q) {
      for (int r : ranks) out[name].push_back(plan.WorldRank(q, r));
    }
  }
  return out;
}

class TorchTraining final : public TrainingSession {
 public:
  TorchTraining(const WorkerOptions& options, PlannerApi& planner)
      : options_(options), planner_(planner) {}
  absl::Status Init();

  const v1::TrainingSpec& spec() const override { return spec_; }
  v1::JobState job_state() const override { return job_state_; }
  void Prepare(int64_t version) override;
  bool Prepared(int64_t version) override { return compiles_.Done(version); }
  SwitchCost LastSwitchCost() const override { return cost_; }
  absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const StagePlan& plan,
                                                         const ExecutorPlace& place) override;
  absl::StatusOr<int64_t> Resume(const StagePlan& plan, const ExecutorPlace& place,
                                 Transport& world, Executor& executor, Executor* previous,
                                 const StagePlan* previous_plan, int64_t step) override;
  absl::Status MaybeCheckpoint(Executor& executor, int64_t plan_version, int64_t steps) override;
  absl::Status CheckpointNow(Executor& executor, int64_t plan_version, int64_t steps) override;
  absl::Status AfterStep(Executor& executor, int64_t steps) override {
    return snapshots_.AfterStep(static_cast<TorchExecutor&>(executor), steps);
  }
  void ReleaseTransport(const Transport* transport) override { snapshots_.Release(transport); }

 private:
  // The compile of `plan`'s stages (no Python yet): FAILED_PRECONDITION as
  // a job failure when the plan does not fit the package or the batch.
  absl::StatusOr<StageCompileRequest> CompileRequest(const StagePlan& plan) const;
  // Fetches `version` and compiles its stages: CompileQueue's job.
  absl::StatusOr<std::string> CompileVersion(int64_t version, const std::atomic<bool>& cancel);
  // `plan`'s compiled stages; `cost` (may be null) gets the compile times.
  absl::StatusOr<std::string> CompiledDir(const StagePlan& plan, SwitchCost* cost = nullptr);
  // Resume's work, timed by Resume.
  absl::StatusOr<int64_t> MoveOrLoadState(const StagePlan& plan, const ExecutorPlace& place,
                                          Transport& world, Executor& executor, Executor* previous,
                                          const StagePlan* previous_plan, int64_t step);
  absl::StatusOr<std::map<std::string, std::vector<std::string>>> HoldersByDevice(
      const StagePlan& plan);
  absl::StatusOr<int64_t> ResumeFromCheckpoint(TorchExecutor& executor, Transport& transport,
                                               int rank, const char* why);
  // Some state has no live holder (a lost rank, a dropped step): every rank
  // rolls back to the newest peer snapshot that covers the model, else to
  // the newest checkpoint (whichever is newer).
  absl::StatusOr<int64_t> ResumeLost(const StagePlan& plan, TorchExecutor& executor,
                                     Transport& world, int rank, const char* why);
  absl::Status WriteCheckpointAt(Executor& executor, int64_t plan_version, int64_t steps);

  const WorkerOptions& options_;
  PlannerApi& planner_;
  v1::TrainingSpec spec_;
  v1::JobState job_state_ = v1::JOB_RUNNING;
  ModelPackage package_;
  std::map<int64_t, std::string> compiled_;  // plan version -> compiled stages dir
  SwitchCost cost_;
  PeerSnapshots snapshots_{options_, spec_};
  // Last: its jobs use the members above until it is destroyed.
  CompileQueue compiles_;
  // After the queue it asks: destroyed (joined) first.
  ContingencyCompiler contingencies_{
      {.get_plan = [this](int64_t v) { return planner_.GetPlan(options_.job_id, v); },
       .get_contingencies =
           [this](int64_t v, int64_t known) {
             return planner_.GetContingencies(options_.job_id, v, known);
           },
       .request = [this](const StagePlan& plan) { return CompileRequest(plan); },
       .busy = [this] { return !compiles_.Idle(); },
       .emit =
           [this](const std::string& line) {
             Emit(absl::StrCat(line, " job=", options_.job_id, " worker=", options_.worker_id));
           }},
      {}};
};

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingSession>> StartTorchTraining(PlannerApi& planner,
                                                                    const WorkerOptions& options) {
  auto t = std::make_unique<TorchTraining>(options, planner);
  PIPEPLAN_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<TrainingSession>(std::move(t));
}

absl::Status TorchTraining::Init() {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::Job job, planner_.GetJob(options_.job_id));
  job_state_ = job.state();
  spec_ = job.training();
  if (spec_.model_package().empty()) {
    return JobFailure(absl::FailedPreconditionError(
        absl::StrCat("job ", options_.job_id,
                     " has no training spec: create it with `jobs create --model-package`")));
  }
  absl::StatusOr<ModelPackage> package = ReadModelPackage(spec_.model_package());
  if (!package.ok()) return FinalIfTrainingError(package.status());
  if (!spec_.package_digest().empty() && package->digest != spec_.package_digest()) {
    return JobFailure(absl::FailedPreconditionError(
        absl::StrCat("model package ", spec_.model_package(), " on this host has digest ",
                     package->digest, ", the job was created with ", spec_.package_digest())));
  }
  package_ = *std::move(package);
  return absl::OkStatus();
}

absl::StatusOr<StageCompileRequest> TorchTraining::CompileRequest(const StagePlan& plan) const {
  // Each replica trains batch / replicas rows, cut into its microbatches.
  const int64_t batch = spec_.batch_size();
  const int64_t cuts = int64_t{plan.num_microbatches} * plan.num_replicas;
  if (plan.num_microbatches < 1 || plan.num_replicas < 1 || batch % cuts != 0) {
    return JobFailure(absl::FailedPreconditionError(absl::StrCat(
        "training.batch_size ", batch, " is not divisible by plan version ", plan.version, "'s ",
        plan.num_replicas, " replicas x ", plan.num_microbatches, " microbatches")));
  }
  StageCompileRequest r;
  r.python = options_.python;
  r.script = options_.stage_compiler;
  r.package_dir = spec_.model_package();
  r.package_digest = package_.digest;
  r.node_stage = NodeStage(plan);
  r.microbatch_size = batch / cuts;
  r.cache_dir = options_.stage_cache;
  if (r.node_stage.size() != package_.nodes.size()) {
    return JobFailure(absl::FailedPreconditionError(
        absl::StrCat("plan version ", plan.version, " places ", r.node_stage.size(),
                     " nodes, the model package has ", package_.nodes.size())));
  }
  return r;
}

void TorchTraining::Prepare(int64_t version) {
  const bool queued = compiles_.Start(version, [this, version](const std::atomic<bool>& cancel) {
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> dir = CompileVersion(version, cancel);
    Emit(absl::StrCat("event=stage_compile_done job=", options_.job_id,
                      " worker=", options_.worker_id, " plan_version=", version,
                      " seconds=", absl::ToDoubleSeconds(absl::Now() - start),
                      " status=", absl::StatusCodeToString(dir.status().code())));
    return dir;
  });
  if (queued) {
    Emit(absl::StrCat("event=stage_compile_start job=", options_.job_id,
                      " worker=", options_.worker_id, " plan_version=", version));
  }
}

absl::StatusOr<std::string> TorchTraining::CompileVersion(int64_t version,
                                                          const std::atomic<bool>& cancel) {
  PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, planner_.GetPlan(options_.job_id, version));
  PIPEPLAN_ASSIGN_OR_RETURN(
      StagePlan plan,
      StagePlanFromProto(vp.plan(), version, &vp.request().graph(), &vp.request().cluster()));
  PIPEPLAN_ASSIGN_OR_RETURN(StageCompileRequest r, CompileRequest(plan));
  r.cancel = &cancel;
  return CompileStages(r);
}

absl::StatusOr<std::string> TorchTraining::CompiledDir(const StagePlan& plan, SwitchCost* cost) {
  if (auto it = compiled_.find(plan.version); it != compiled_.end()) {
    return it->second;
  }
  const absl::Time start = absl::Now();
  // The background compile's result when it has one; else (never started,
  // dropped, or failed: the error is produced again here, as a job failure
  // when final) compile now.
  std::optional<CompileQueue::Result> background = compiles_.Wait(plan.version);
  absl::StatusOr<std::string> dir = background ? background->dir : absl::UnknownError("");
  double compile_seconds = background ? background->seconds : 0;
  if (!dir.ok()) {
    const absl::Time now = absl::Now();
    PIPEPLAN_ASSIGN_OR_RETURN(const StageCompileRequest r, CompileRequest(plan));
    dir = CompileStages(r);
    if (!dir.ok()) return FinalIfTrainingError(dir.status());
    compile_seconds = absl::ToDoubleSeconds(absl::Now() - now);
  }
  if (cost != nullptr) {
    cost->compile_seconds = compile_seconds;
    cost->compile_wait_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  }
  compiled_[plan.version] = *dir;
  return *dir;
}

absl::StatusOr<std::unique_ptr<Executor>> TorchTraining::MakeExecutor(const StagePlan& plan,
                                                                      const ExecutorPlace& place) {
  cost_ = SwitchCost();
  PIPEPLAN_ASSIGN_OR_RETURN(const std::string dir, CompiledDir(plan, &cost_));
  // The version runs from here: what a loss in it would publish is next.
  contingencies_.SetRunning(plan.version);
  absl::StatusOr<CompiledStages> stages = ReadCompiledStages(dir);
  if (!stages.ok()) return FinalIfTrainingError(stages.status());
  TorchInputs torch{.package = &package_, .spec = &spec_, .stages = *std::move(stages)};
  absl::StatusOr<std::unique_ptr<Executor>> executor =
      worker::MakeExecutor(options_, plan, v1::ModelGraph(), place, &torch);
  if (!executor.ok()) return FinalIfTrainingError(executor.status());
  return executor;
}

absl::StatusOr<std::map<std::string, std::vector<std::string>>> TorchTraining::HoldersByDevice(
    const StagePlan& plan) {
  PIPEPLAN_ASSIGN_OR_RETURN(const std::string dir, CompiledDir(plan));
  absl::StatusOr<CompiledStages> stages = ReadCompiledStages(dir);
  if (!stages.ok()) return FinalIfTrainingError(stages.status());
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [name, ranks] : OwnersOf(*stages, plan.lowered.stage_to_rank)) {
    for (const std::vector<std::string>& devices : plan.replica_devices) {
      for (int r : ranks) out[name].push_back(devices[r]);
    }
  }
  return out;
}

absl::StatusOr<int64_t> TorchTraining::Resume(const StagePlan& plan, const ExecutorPlace& place,
                                              Transport& world, Executor& executor,
                                              Executor* previous, const StagePlan* previous_plan,
                                              int64_t step) {
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> resumed =
      MoveOrLoadState(plan, place, world, executor, previous, previous_plan, step);
  cost_.state_move_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!resumed.ok()) return resumed;
  // The version's first peer snapshot: a loss right after the switch rolls
  // back no further than here.
  PIPEPLAN_RETURN_IF_ERROR(
      snapshots_.StartVersion(plan, world, static_cast<TorchExecutor&>(executor), *resumed));
  return resumed;
}

absl::StatusOr<int64_t> TorchTraining::MoveOrLoadState(const StagePlan& plan,
                                                       const ExecutorPlace& place, Transport& world,
                                                       Executor& executor, Executor* previous,
                                                       const StagePlan* previous_plan,
                                                       int64_t step) {
  auto& torch = static_cast<TorchExecutor&>(executor);
  const int64_t mine = previous ? previous_plan->version : 0;
  PIPEPLAN_ASSIGN_OR_RETURN(const int64_t source, world.AllReduceMax(mine, options_.comm_timeout));
  if (source == 0) return ResumeLost(plan, torch, world, place.rank, "start");
  // A plan switch: the previous version's holders send each piece of state
  // to its holders in this version (in every replica), over this version's
  // transport.
  std::map<std::string, std::vector<std::string>> before;
  if (mine == source) {
    PIPEPLAN_ASSIGN_OR_RETURN(before, HoldersByDevice(*previous_plan));
  } else {
    PIPEPLAN_ASSIGN_OR_RETURN(v1::VersionedPlan vp, planner_.GetPlan(options_.job_id, source));
    PIPEPLAN_ASSIGN_OR_RETURN(
        StagePlan old,
        StagePlanFromProto(vp.plan(), source, &vp.request().graph(), &vp.request().cluster()));
    PIPEPLAN_ASSIGN_OR_RETURN(before, HoldersByDevice(old));
  }
  // Some state has no live holder when every device that held it left the
  // plan (a lost worker), or when a holder dropped its state (a step cut
  // short by a failed peer). Then every device rolls back to the newest
  // checkpoint, survivors included: mixing their newer state with the
  // checkpoint's older one would train a model that no single step ever had.
  // A replica's device lost while another replica still holds the state is
  // not a loss: the state moves from the survivor.
  bool lost = false;
  for (const auto& [name, devices] : before) {
    bool live = false;
    for (const std::string& device : devices) {
      if (device == options_.device_id && mine != source) lost = true;
      live |= plan.RankOf(device) >= 0;
    }
    lost |= !live;
  }
  PIPEPLAN_ASSIGN_OR_RETURN(const int64_t any_lost,
                            world.AllReduceMax(lost ? 1 : 0, options_.comm_timeout));
  if (any_lost != 0) return ResumeLost(plan, torch, world, place.rank, "lost_state");
  PIPEPLAN_ASSIGN_OR_RETURN(const ParameterOwners from, SourcesIn(plan, before));
  StatePack local;
  if (mine == source) {
    PIPEPLAN_RETURN_IF_ERROR(static_cast<TorchExecutor*>(previous)->ExportPack(local));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(
      NamedState moved, MoveState(world, local.views, from, InEveryReplica(plan, torch.owners()),
                                  static_cast<uint64_t>(plan.version), options_.comm_timeout));
  absl::Status imported = torch.ImportState(moved, /*complete=*/true);
  if (!imported.ok()) return FinalIfTrainingError(imported);
  PIPEPLAN_ASSIGN_OR_RETURN(const int64_t agreed, world.AllReduceMax(step, options_.comm_timeout));
  Emit(absl::StrCat("event=resume job=", options_.job_id, " worker=", options_.worker_id,
                    " plan_version=", plan.version, " from=peers source_version=", source,
                    " step=", agreed));
  return agreed;
}

absl::StatusOr<int64_t> TorchTraining::ResumeLost(const StagePlan& plan, TorchExecutor& executor,
                                                  Transport& world, int rank, const char* why) {
  // The newest checkpoint's step: a snapshot older than it is not used.
  int64_t checkpoint_step = 0;
  if (!spec_.checkpoint_dir().empty()) {
    PIPEPLAN_ASSIGN_OR_RETURN(std::optional<std::string> latest,
                              LatestCheckpoint(spec_.checkpoint_dir()));
    if (latest) {
      absl::StatusOr<CheckpointManifest> m = ReadCheckpointManifest(*latest);
      if (!m.ok()) return FinalIfTrainingError(m.status());
      checkpoint_step = m->meta.step;
    }
  }
  absl::StatusOr<std::optional<int64_t>> restored =
      snapshots_.Restore(world, executor, InEveryReplica(plan, executor.owners()), checkpoint_step,
                         static_cast<uint64_t>(plan.version) | (uint64_t{1} << 22));
  if (!restored.ok()) return FinalIfTrainingError(restored.status());
  if (!*restored) return ResumeFromCheckpoint(executor, world, rank, why);
  Emit(absl::StrCat("event=resume job=", options_.job_id, " worker=", options_.worker_id,
                    " plan_version=", plan.version, " from=snapshot why=", why,
                    " step=", **restored));
  return **restored;
}

// The newest complete checkpoint, if any, on every rank (step 0 without
// one): at a fresh start, and when some state has no live holder.
absl::StatusOr<int64_t> TorchTraining::ResumeFromCheckpoint(TorchExecutor& executor,
                                                            Transport& transport, int rank,
                                                            const char* why) {
  int64_t resumed = 0;
  std::string dir = "none";
  if (!spec_.checkpoint_dir().empty()) {
    PIPEPLAN_ASSIGN_OR_RETURN(std::optional<std::string> latest,
                              LatestCheckpoint(spec_.checkpoint_dir()));
    if (latest) {
      absl::StatusOr<CheckpointMeta> meta = executor.LoadCheckpoint(*latest);
      if (!meta.ok()) return FinalIfTrainingError(meta.status());
      resumed = meta->step;
      dir = *latest;
    }
  }
  PIPEPLAN_ASSIGN_OR_RETURN(const int64_t agreed,
                            transport.AllReduceMax(resumed, options_.comm_timeout));
  if (agreed != resumed) {
    return JobFailure(absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " resumes from step ", resumed, " but another rank from step ", agreed,
        ": every worker must see the same checkpoint directory ", spec_.checkpoint_dir())));
  }
  Emit(absl::StrCat("event=resume job=", options_.job_id, " worker=", options_.worker_id,
                    " from=checkpoint why=", why, " checkpoint=", dir, " step=", agreed));
  return agreed;
}

absl::Status TorchTraining::MaybeCheckpoint(Executor& executor, int64_t plan_version,
                                            int64_t steps) {
  const int64_t every = spec_.checkpoint_every();
  if (every <= 0 || spec_.checkpoint_dir().empty() || steps % every != 0) return absl::OkStatus();
  return WriteCheckpointAt(executor, plan_version, steps);
}

absl::Status TorchTraining::CheckpointNow(Executor& executor, int64_t plan_version, int64_t steps) {
  const int64_t every = spec_.checkpoint_every();
  if (spec_.checkpoint_dir().empty() || steps <= 0 || (every > 0 && steps % every == 0)) {
    return absl::OkStatus();
  }
  return WriteCheckpointAt(executor, plan_version, steps);
}

absl::Status TorchTraining::WriteCheckpointAt(Executor& executor, int64_t plan_version,
                                              int64_t steps) {
  CheckpointMeta meta{
      .step = steps, .plan_version = plan_version, .data_position = steps * spec_.batch_size()};
  const std::string dir = CheckpointDir(spec_.checkpoint_dir(), steps);
  const absl::Time start = absl::Now();
  PIPEPLAN_RETURN_IF_ERROR(static_cast<TorchExecutor&>(executor).WriteCheckpoint(dir, meta));
  // Every shard is written once WriteCheckpoint returns (it ends with a
  // barrier): the checkpoint's size, for write MB/s.
  std::error_code ec;
  uintmax_t bytes = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    if (f.is_regular_file(ec)) bytes += f.file_size(ec);
  }
  Emit(absl::StrCat("event=checkpoint job=", options_.job_id, " worker=", options_.worker_id,
                    " step=", steps, " seconds=", absl::ToDoubleSeconds(absl::Now() - start),
                    " checkpoint_bytes=", bytes));
  return absl::OkStatus();
}

}  // namespace pipeplan::worker
