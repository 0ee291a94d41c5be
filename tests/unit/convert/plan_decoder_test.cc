// The one reader of a published plan (plan_decoder.h): its defaults, its
// field-level errors, and that it reads back what the planner writes.
#include "pipeplan/convert/plan_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/csv.h"
#include "support/test_data.h"

namespace pipeplan {
namespace {

using schedule::ScheduleKind;
using ::testing::HasSubstr;

// A plan by hand: stage s on devices[s], one node per stage.
v1::Plan PlanOn(const std::vector<std::string>& devices, v1::Schedule schedule,
                int microbatches = 4) {
  v1::Plan p;
  p.set_schedule(schedule);
  p.set_microbatches(microbatches);
  for (size_t s = 0; s < devices.size(); ++s) {
    v1::Stage* st = p.add_stages();
    st->set_index(static_cast<int>(s));
    st->set_device_id(devices[s]);
    st->set_forward_seconds(0.1 * (s + 1));
    p.add_node_stage(static_cast<int>(s));
  }
  return p;
}

void ExpectInvalid(const v1::Plan& plan, const std::string& message) {
  absl::StatusOr<DecodedPlan> d = DecodePlan(plan);
  ASSERT_FALSE(d.ok()) << message;
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr(message));
}

TEST(DecodePlan, ReadsBackWhatThePlannerWrites) {
  v1::PlanRequest req;
  *req.mutable_graph() = testing::ReadJson<v1::ModelGraph>("chain_small.json");
  *req.mutable_cluster() = testing::ReadJson<v1::ClusterTopology>("cluster_8xa100.json");
  req.mutable_options()->set_num_ranks(2);
  req.mutable_options()->set_microbatches(4);
  req.mutable_options()->set_method(v1::METHOD_DP);
  for (v1::Schedule s :
       {v1::SCHEDULE_1F1B, v1::SCHEDULE_INTERLEAVED_1F1B, v1::SCHEDULE_ZBV_ZERO_BUBBLE}) {
    req.mutable_options()->set_schedule(s);
    absl::StatusOr<PlanInputs> in = PlanInputs::FromRequest(req);
    ASSERT_TRUE(in.ok()) << in.status();
    absl::StatusOr<PlanResult> result = MakePlan(*in->graph, *in->cluster, in->options);
    ASSERT_TRUE(result.ok()) << result.status();
    absl::StatusOr<DecodedPlan> d = DecodePlan(PlanToProto(*in->graph, *in->cluster, *result));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->schedule, result->schedule);
    EXPECT_EQ(d->num_ranks, result->num_ranks);
    EXPECT_EQ(d->chunks_per_rank, result->chunks_per_rank);
    EXPECT_EQ(d->microbatches, result->microbatches);
    EXPECT_EQ(d->node_stage, result->partition.stage_of_node);
    ASSERT_EQ(d->num_stages(), static_cast<int>(result->stage_device.size()));
    for (int st = 0; st < d->num_stages(); ++st) {
      EXPECT_EQ(d->stages[st].device_id, in->cluster->device(result->stage_device[st]).id);
      EXPECT_EQ(d->stages[st].rank, d->compute_schedule.stage_to_rank[st]);
    }
    auto built = schedule::BuildSchedule(result->schedule, result->num_ranks, result->microbatches,
                                         result->chunks_per_rank);
    ASSERT_TRUE(built.ok());
    EXPECT_EQ(schedule::ScheduleToCsv(d->compute_schedule), schedule::ScheduleToCsv(*built));
  }
}

// chunks_per_rank 0 reads as the request default (2) for the looped
// schedules; the others place what they always place.
TEST(DecodePlan, ChunksPerRankDefaultsLikeTheRequest) {
  struct Case {
    v1::Schedule schedule;
    std::vector<std::string> devices;
    int chunks_per_rank;
  };
  for (const Case& c : {Case{v1::SCHEDULE_1F1B, {"a", "b"}, 1},
                        Case{v1::SCHEDULE_INTERLEAVED_1F1B, {"a", "b", "a", "b"}, 2},
                        Case{v1::SCHEDULE_LOOPED_BFS, {"a", "b", "a", "b"}, 2},
                        Case{v1::SCHEDULE_ZBV_ZERO_BUBBLE, {"a", "b", "b", "a"}, 2}}) {
    absl::StatusOr<DecodedPlan> d = DecodePlan(PlanOn(c.devices, c.schedule));
    ASSERT_TRUE(d.ok()) << v1::Schedule_Name(c.schedule) << ": " << d.status();
    EXPECT_EQ(d->num_ranks, 2);
    EXPECT_EQ(d->chunks_per_rank, c.chunks_per_rank) << v1::Schedule_Name(c.schedule);
    EXPECT_EQ(d->rank_devices, (std::vector<std::string>{"a", "b"}));
  }
  // Given explicitly, the interleave depth is what the plan says.
  v1::Plan three = PlanOn({"a", "b", "a", "b", "a", "b"}, v1::SCHEDULE_INTERLEAVED_1F1B);
  three.set_chunks_per_rank(3);
  absl::StatusOr<DecodedPlan> d = DecodePlan(three);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->chunks_per_rank, 3);
  EXPECT_EQ(d->compute_schedule.num_stages, 6);
}

TEST(DecodePlan, NamesTheFieldOfEveryError) {
  ExpectInvalid(v1::Plan(), "plan.stages: empty");
  ExpectInvalid(PlanOn({"a", "b"}, v1::SCHEDULE_AUTO),
                "plan.schedule: SCHEDULE_AUTO is not a runnable schedule");
  ExpectInvalid(PlanOn({"a", "b"}, static_cast<v1::Schedule>(42)),
                "plan.schedule: 42 is not a known schedule");
  ExpectInvalid(PlanOn({"a", "b"}, v1::SCHEDULE_1F1B, 0), "plan.microbatches: 0 must be >= 1");
  ExpectInvalid(PlanOn({"a", ""}, v1::SCHEDULE_1F1B), "plan.stages[1].device_id: empty");

  v1::Plan p = PlanOn({"a", "b"}, v1::SCHEDULE_1F1B);
  p.set_chunks_per_rank(-1);
  ExpectInvalid(p, "plan.chunks_per_rank: -1 must be >= 0");
  p.set_chunks_per_rank(2);
  ExpectInvalid(p, "plan.chunks_per_rank: 2, but 1F1B places 1 stage on each rank");
  p.set_chunks_per_rank(0);
  p.set_comm_model(static_cast<v1::CommModel>(9));
  ExpectInvalid(p, "plan.comm_model: 9 is not a known model");

  // 4 stages on 4 devices, but the interleaved default holds 2 per rank.
  ExpectInvalid(PlanOn({"a", "b", "c", "d"}, v1::SCHEDULE_INTERLEAVED_1F1B),
                "plan.stages: 4 stages on 4 ranks (devices), but Interleaved1F1B with "
                "chunks_per_rank 2 places 8");
  // Interleaved places stage 2 on rank 0 ("a"), the V shape would put it on "b".
  ExpectInvalid(PlanOn({"a", "b", "b", "a"}, v1::SCHEDULE_INTERLEAVED_1F1B),
                "plan.stages[2].device_id: \"b\", but Interleaved1F1B places stage 2 on rank 0 "
                "(device \"a\")");
  // Microbatches the schedule rejects.
  ExpectInvalid(PlanOn({"a", "b", "b", "a"}, v1::SCHEDULE_DUALPIPE_V, 2), "plan: DualPipeV");

  p = PlanOn({"a", "b"}, v1::SCHEDULE_1F1B);
  p.set_node_stage(1, 9);
  ExpectInvalid(p, "plan.node_stage[1]: 9 is not a stage (the plan has 2)");

  // Ranks x chunks_per_rank in 64 bits (the plan_decoder fuzzer's UBSan
  // finding: 4 x INT32_MAX).
  p = PlanOn({"a", "b", "c", "d"}, v1::SCHEDULE_INTERLEAVED_1F1B);
  p.set_chunks_per_rank(2147483647);
  ExpectInvalid(p, "with chunks_per_rank 2147483647 places 8589934588");
}

TEST(DecodePlan, TimeFactorsOnlyWhenPositiveAndFinite) {
  v1::Plan p = PlanOn({"a", "b", "c"}, v1::SCHEDULE_1F1B);
  auto factor = [&](const std::string& device, double f) {
    v1::DeviceFactor* d = p.mutable_calibration()->add_devices();
    d->set_device_id(device);
    d->set_time_factor(f);
  };
  factor("a", 2.0);
  factor("b", -1);
  factor("c", std::numeric_limits<double>::infinity());
  absl::StatusOr<DecodedPlan> d = DecodePlan(p);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->time_factors, (std::map<std::string, double>{{"a", 2.0}}));
  EXPECT_DOUBLE_EQ(d->stages[0].time_factor, 2.0);
  EXPECT_DOUBLE_EQ(d->stages[1].time_factor, 1.0);
  EXPECT_DOUBLE_EQ(d->stages[2].time_factor, 1.0);
  const std::vector<PlannedStage> planned = d->PlannedStages();
  ASSERT_EQ(planned.size(), 3u);
  EXPECT_EQ(planned[0].device_id, "a");
  EXPECT_DOUBLE_EQ(planned[0].time_factor, 2.0);
  EXPECT_DOUBLE_EQ(planned[2].forward_seconds, 0.3);
}

// A plan written before replicas existed (no Plan.replicas) reads as one
// replica on the stages' devices.
TEST(DecodePlan, PlansWithoutReplicasReadAsOne) {
  absl::StatusOr<DecodedPlan> d = DecodePlan(PlanOn({"a", "b"}, v1::SCHEDULE_1F1B));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_replicas, 1);
  EXPECT_EQ(d->replica_devices, (std::vector<std::vector<std::string>>{{"a", "b"}}));
  EXPECT_EQ(d->ReplicaGroup(1), (std::vector<std::string>{"b"}));
  EXPECT_EQ(d->ReplicaOf("b"), 0);
  EXPECT_EQ(d->ReplicaOf("z"), -1);
}

TEST(DecodePlan, ReadsReplicasAndTheirAllReduceGroups) {
  v1::Plan p = PlanOn({"a", "b"}, v1::SCHEDULE_1F1B);
  for (const auto& devices :
       std::vector<std::vector<std::string>>{{"a", "b"}, {"c", "d"}, {"e", "f"}}) {
    v1::Replica* r = p.add_replicas();
    for (const std::string& id : devices) r->add_rank_device_ids(id);
  }
  p.mutable_stages(1)->set_recompute(true);
  p.mutable_stages(1)->set_allreduce_seconds(0.25);
  absl::StatusOr<DecodedPlan> d = DecodePlan(p);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_replicas, 3);
  EXPECT_EQ(d->num_ranks, 2);
  EXPECT_EQ(d->ReplicaGroup(0), (std::vector<std::string>{"a", "c", "e"}));
  EXPECT_EQ(d->ReplicaGroup(1), (std::vector<std::string>{"b", "d", "f"}));
  EXPECT_EQ(d->RankOf("d"), 1);
  EXPECT_EQ(d->ReplicaOf("d"), 1);
  EXPECT_EQ(d->RankOf("e"), 0);
  EXPECT_EQ(d->ReplicaOf("e"), 2);
  EXPECT_EQ(RankOfDevice(p, "f"), 1);
  EXPECT_TRUE(d->stages[1].recompute);
  EXPECT_DOUBLE_EQ(d->stages[1].allreduce_seconds, 0.25);

  v1::Plan bad = p;
  bad.mutable_replicas(1)->add_rank_device_ids("g");
  ExpectInvalid(bad, "plan.replicas[1].rank_device_ids: 3 devices, but the plan has 2 ranks");
  bad = p;
  bad.mutable_replicas(2)->set_rank_device_ids(0, "c");
  ExpectInvalid(bad,
                "plan.replicas[2].rank_device_ids[0]: \"c\" is already "
                "plan.replicas[1].rank_device_ids[0]");
  bad = p;
  bad.mutable_replicas(0)->set_rank_device_ids(1, "z");
  ExpectInvalid(bad, "plan.replicas[0].rank_device_ids[1]: \"z\", but the stages put rank 1");
}

// What the planner writes with replicas, the decoder reads back.
TEST(DecodePlan, ReadsBackAPlanWithReplicas) {
  v1::PlanRequest req;
  *req.mutable_graph() = testing::ReadJson<v1::ModelGraph>("chain_small.json");
  *req.mutable_cluster() = testing::ReadJson<v1::ClusterTopology>("cluster_8xa100.json");
  req.mutable_options()->set_num_ranks(2);
  req.mutable_options()->set_num_replicas(4);
  req.mutable_options()->set_method(v1::METHOD_DP);
  absl::StatusOr<PlanInputs> in = PlanInputs::FromRequest(req);
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<PlanResult> result = MakePlan(*in->graph, *in->cluster, in->options);
  ASSERT_TRUE(result.ok()) << result.status();
  const v1::Plan wire = PlanToProto(*in->graph, *in->cluster, *result);
  ASSERT_EQ(wire.replicas_size(), 4);
  absl::StatusOr<DecodedPlan> d = DecodePlan(wire);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_replicas, 4);
  for (int q = 0; q < 4; ++q) {
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(d->replica_devices[q][r], in->cluster->device(result->rank_device[q * 2 + r]).id);
    }
  }
}

TEST(RankOfDevice, DistinctDevicesInStageOrder) {
  v1::Plan p = PlanOn({"a", "b", "a", "b"}, v1::SCHEDULE_AUTO);  // need not be runnable
  EXPECT_EQ(RankOfDevice(p, "a"), 0);
  EXPECT_EQ(RankOfDevice(p, "b"), 1);
  EXPECT_EQ(RankOfDevice(p, "c"), -1);
}

TEST(FixedPlanOf, MapsStagesToClusterDevicesAndMissesExcludedOnes) {
  ClusterSpec spec{.intra_host_bandwidth = 1e11};
  for (const char* id : {"x", "b", "a"}) spec.devices.push_back({id, "h0", 1e14, 8e10});
  absl::StatusOr<Cluster> cluster = Cluster::Build(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<DecodedPlan> d =
      DecodePlan(PlanOn({"a", "b", "a", "b"}, v1::SCHEDULE_INTERLEAVED_1F1B));
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<FixedPlan> fixed =
      FixedPlanOf(*d, *cluster, {.global_batch = 8, .optimizer_state_multiplier = 2});
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->stage_device, (std::vector<int>{2, 1, 2, 1}));
  EXPECT_EQ(fixed->ranks, 2);
  EXPECT_EQ(fixed->chunks_per_rank, 2);
  EXPECT_EQ(fixed->schedule, ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(fixed->global_batch, 8);
  EXPECT_EQ(fixed->node_stage, (std::vector<int>{0, 1, 2, 3}));

  spec.devices.pop_back();  // "a" is gone
  cluster = Cluster::Build(spec);
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(FixedPlanOf(*d, *cluster, {}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pipeplan
