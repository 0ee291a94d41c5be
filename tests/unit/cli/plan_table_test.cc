// `plan --explain` (FormatShapeTable): a shape with a stage that computes
// nothing is listed last and says why — which stage, and its nodes — from a
// real plan of the core, through the wire message the CLI prints.
#include "plan_table.h"

#include <string>

#include "gtest/gtest.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"

namespace pipeplan::cli {
namespace {

// x (a graph input without flops) -> b0 -> b1.
Graph InputAndTwoBlocks() {
  GraphSpec g{.name = "chain", .batch_size = 1};
  g.nodes.push_back({.id = "x", .output_bytes = 1e6});
  for (const char* id : {"b0", "b1"}) {
    g.nodes.push_back({.id = id, .forward_flops = 1e12, .param_bytes = 1e6, .output_bytes = 1e6});
  }
  g.edges.push_back({"x", "b0", 0});
  g.edges.push_back({"b0", "b1", 0});
  return *Graph::Build(std::move(g));
}

Cluster Devices(int count) {
  ClusterSpec c;
  for (int i = 0; i < count; ++i) c.devices.push_back({"gpu" + std::to_string(i), "h", 1e14, 8e10});
  return *Cluster::Build(std::move(c));
}

TEST(PlanTableTest, ExplainSaysWhichStageOfADegeneratePlanComputesNothing) {
  const Graph g = InputAndTwoBlocks();
  const Cluster c = Devices(3);
  // Three ranks for three nodes: the input alone on stage 0.
  auto plan = MakePlan(g, c, {.num_ranks = 3, .num_replicas = 1, .microbatches = 4});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->degenerate());
  const v1::Plan wire = PlanToProto(g, c, *plan);
  ASSERT_EQ(wire.shapes_size(), 1);
  EXPECT_EQ(wire.shapes(0).degenerate(),
            "stage 0 of 3 computes nothing (its 1 node, x, has no flops): a rank that only waits");
  const std::string text = FormatShapeTable(wire, 0);
  EXPECT_NE(text.find("ranked last, degenerate: stage 0 of 3 computes nothing"), std::string::npos)
      << text;
}

TEST(PlanTableTest, ExplainMarksOnlyTheDegenerateShapes) {
  const Graph g = InputAndTwoBlocks();
  const Cluster c = Devices(2);
  auto plan = MakePlan(g, c, {.num_ranks = 2, .num_replicas = 1, .microbatches = 4});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->degenerate());  // x rides with b0
  v1::Plan wire = PlanToProto(g, c, *plan);
  ASSERT_EQ(wire.shapes_size(), 1);
  EXPECT_EQ(wire.shapes(0).degenerate(), "");
  v1::Alternative* last = wire.add_shapes();
  *last = wire.shapes(0);
  last->set_num_ranks(3);
  last->set_degenerate("stage 0 of 3 computes nothing");
  const std::string text = FormatShapeTable(wire, 0);
  const size_t marked = text.find("ranked last, degenerate: stage 0 of 3");
  ASSERT_NE(marked, std::string::npos) << text;
  EXPECT_EQ(text.find("ranked last"), marked) << "only the degenerate shape is marked:\n" << text;
  EXPECT_LT(text.find("ranks 2 "), text.find("ranks 3 ")) << text;
}

}  // namespace
}  // namespace pipeplan::cli
