// Every reader of a published plan gets the same schedule from it: the
// worker (StagePlanFromProto), the CLI (`simulate --plan`), the replan policy
// (the FixedPlan it scores the current plan with) and the job registry (the
// rank it assigns a worker). They all go through the one decoder; this test
// keeps it so. Plans without chunks_per_rank are included: the readers used
// to default it differently (2 in the worker, 1 in the CLI).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "pipeplan/convert/plan_decoder.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/csv.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/server/base/clock.h"
#include "pipeplan/server/jobs/job_registry.h"
#include "pipeplan/server/obs/log.h"
#include "pipeplan/server/store/store.h"
#include "pipeplan/worker/runtime/stage_plan.h"
#include "simulate_command.h"
#include "support/test_data.h"

namespace pipeplan {
namespace {

struct Job {
  v1::PlanRequest request;
  v1::Plan plan;
};

// What the planner publishes for `schedule` on chain_small with 2 ranks.
Job Planned(v1::Schedule schedule) {
  Job job;
  *job.request.mutable_graph() = testing::ReadJson<v1::ModelGraph>("chain_small.json");
  *job.request.mutable_cluster() = testing::ReadJson<v1::ClusterTopology>("cluster_8xa100.json");
  v1::PlanOptions* o = job.request.mutable_options();
  o->set_num_ranks(2);
  o->set_microbatches(4);
  o->set_schedule(schedule);
  o->set_method(v1::METHOD_DP);
  absl::StatusOr<PlanInputs> in = PlanInputs::FromRequest(job.request);
  if (!in.ok()) std::abort();
  absl::StatusOr<PlanResult> result = MakePlan(*in->graph, *in->cluster, in->options);
  if (!result.ok()) std::abort();
  job.plan = PlanToProto(*in->graph, *in->cluster, *result);
  return job;
}

std::string Lowered(const schedule::PipelineSchedule& compute) {
  absl::StatusOr<schedule::PipelineSchedule> lowered = schedule::InsertSendRecv(compute);
  EXPECT_TRUE(lowered.ok()) << lowered.status();
  return lowered.ok() ? schedule::ScheduleToCsv(*lowered) : "";
}

void ExpectOneScheduleForEveryReader(const Job& job) {
  SCOPED_TRACE(ToJson(job.plan, /*pretty=*/false).substr(0, 200));
  absl::StatusOr<DecodedPlan> decoded = DecodePlan(job.plan);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const std::string expected = Lowered(decoded->compute_schedule);

  // The worker runs this.
  absl::StatusOr<worker::StagePlan> stage_plan =
      worker::StagePlanFromProto(job.plan, 1, &job.request.graph(), &job.request.cluster());
  ASSERT_TRUE(stage_plan.ok()) << stage_plan.status();
  EXPECT_EQ(schedule::ScheduleToCsv(stage_plan->lowered), expected) << "worker";

  // `pipeplan simulate --plan` simulates this.
  absl::StatusOr<cli::Scenario> scenario = cli::ScenarioFromPlan(job.plan);
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  EXPECT_EQ(Lowered(scenario->schedule), expected) << "cli";

  // The replan policy scores the current plan with this.
  absl::StatusOr<PlanInputs> in = PlanInputs::FromRequest(job.request);
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<FixedPlan> fixed = FixedPlanOf(*decoded, *in->cluster, in->options);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  absl::StatusOr<schedule::PipelineSchedule> scored = schedule::BuildSchedule(
      fixed->schedule, fixed->ranks, fixed->microbatches, fixed->chunks_per_rank);
  ASSERT_TRUE(scored.ok()) << scored.status();
  EXPECT_EQ(Lowered(*scored), expected) << "replan policy";

  // The registry assigns each device the rank the schedule runs its stages on.
  server::SetLogEnabled(false);
  std::unique_ptr<server::Store> store = server::NewMemoryStore();
  server::FakeClock clock;
  server::JobRegistry registry(store.get(), &clock, {});
  absl::StatusOr<v1::Job> created = registry.CreateJob("j", job.request, job.plan);
  ASSERT_TRUE(created.ok()) << created.status();
  for (int s = 0; s < decoded->num_stages(); ++s) {
    v1::WorkerInfo w;
    w.set_worker_id("w-" + decoded->stages[s].device_id);
    w.set_device_id(decoded->stages[s].device_id);
    absl::StatusOr<v1::Assignment> a = registry.RegisterWorker(created->id(), w);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->rank(), decoded->compute_schedule.stage_to_rank[s]) << "registry, stage " << s;
    EXPECT_EQ(a->rank(), stage_plan->RankOf(w.device_id())) << "registry vs worker";
  }
  server::SetLogEnabled(true);
}

TEST(PlanReaders, AgreeOnPlannedSchedules) {
  for (v1::Schedule s : {v1::SCHEDULE_GPIPE, v1::SCHEDULE_1F1B, v1::SCHEDULE_INTERLEAVED_1F1B,
                         v1::SCHEDULE_INTERLEAVED_ZERO_BUBBLE, v1::SCHEDULE_ZBV_ZERO_BUBBLE}) {
    ExpectOneScheduleForEveryReader(Planned(s));
  }
}

TEST(PlanReaders, AgreeOnPlansWithoutChunksPerRank) {
  for (v1::Schedule s : {v1::SCHEDULE_INTERLEAVED_1F1B, v1::SCHEDULE_ZBV_ZERO_BUBBLE}) {
    Job job = Planned(s);
    ASSERT_EQ(job.plan.chunks_per_rank(), 2);
    job.plan.clear_chunks_per_rank();
    ExpectOneScheduleForEveryReader(job);
  }
}

}  // namespace
}  // namespace pipeplan
