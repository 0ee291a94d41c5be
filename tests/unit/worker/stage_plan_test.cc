#include "pipeplan/worker/runtime/stage_plan.h"

#include "gtest/gtest.h"
#include "pipeplan/v1/cluster.pb.h"
#include "pipeplan/v1/graph.pb.h"

namespace pipeplan::worker {
namespace {

TEST(StagePlan, LowersTheScheduleAndSumsCrossingBytes) {
  v1::ModelGraph g;
  for (const char* id : {"a", "b", "c", "d"}) {
    auto* n = g.add_nodes();
    n->set_id(id);
    n->set_output_bytes(100);
  }
  auto edge = [&](const char* s, const char* d, double bytes) {
    auto* e = g.add_edges();
    e->set_src(s);
    e->set_dst(d);
    e->set_bytes(bytes);
  };
  edge("a", "b", 0);   // 100 bytes across boundary 0
  edge("b", "c", 7);   // boundary 1
  edge("a", "d", 50);  // relayed across 0, 1 and 2
  edge("c", "d", 0);   // boundary 2
  v1::Plan plan;
  plan.set_schedule(v1::SCHEDULE_1F1B);
  plan.set_microbatches(4);
  for (int s = 0; s < 4; ++s) {
    auto* st = plan.add_stages();
    st->set_index(s);
    st->set_device_id("gpu" + std::to_string(s));
    st->set_forward_seconds(0.1 * (s + 1));
    plan.add_node_stage(s);
  }
  v1::ClusterTopology cluster;
  for (int d = 0; d < 3; ++d) {  // gpu3 is not listed: no host known
    v1::Device* device = cluster.add_devices();
    device->set_id("gpu" + std::to_string(d));
    device->set_host(d < 2 ? "h0" : "h1");
  }
  auto sp = StagePlanFromProto(plan, 3, &g, &cluster);
  ASSERT_TRUE(sp.ok()) << sp.status();
  EXPECT_EQ(sp->replica_hosts, (std::vector<std::vector<std::string>>{{"h0", "h0", "h1", ""}}));
  EXPECT_EQ(sp->version, 3);
  EXPECT_EQ(sp->num_ranks, 4);
  EXPECT_EQ(sp->RankOf("gpu2"), 2);
  EXPECT_EQ(sp->RankOf("cpu"), -1);
  EXPECT_TRUE(sp->lowered.HasCommunication());
  EXPECT_EQ(sp->boundary_bytes, (std::vector<double>{150, 57, 150}));
  EXPECT_EQ(sp->stage_nodes.size(), 4u);
  EXPECT_DOUBLE_EQ(sp->forward_seconds[3], 0.4);

  EXPECT_TRUE(StagePlanFromProto(plan, 3, &g, nullptr)->replica_hosts.empty());

  plan.set_schedule(v1::SCHEDULE_AUTO);
  EXPECT_EQ(StagePlanFromProto(plan, 1, nullptr, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  plan.set_schedule(v1::SCHEDULE_INTERLEAVED_1F1B);  // 4 stages on 4 devices, 2 per rank
  EXPECT_EQ(StagePlanFromProto(plan, 1, nullptr, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pipeplan::worker
