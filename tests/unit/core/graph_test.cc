#include "pipeplan/core/graph.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pipeplan {
namespace {

using ::testing::HasSubstr;

GraphSpec Diamond() {
  GraphSpec g;
  g.name = "diamond";
  for (const char* id : {"a", "b", "c", "d"}) g.nodes.push_back({.id = id, .forward_flops = 1});
  g.edges = {{"a", "b"}, {"a", "c"}, {"b", "d"}, {"c", "d"}};
  return g;
}

void ExpectError(GraphSpec spec, absl::StatusCode code, const std::string& message,
                 GraphLimits limits = {}) {
  auto g = Graph::Build(std::move(spec), limits);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), code);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr(message));
}

TEST(GraphTest, BuildsCsrAndTopologicalOrder) {
  auto g = Graph::Build(Diamond());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->num_nodes(), 4);
  EXPECT_EQ(g->num_edges(), 4);
  EXPECT_EQ(g->out_edges(0).size(), 2u);
  EXPECT_EQ(g->in_edges(3).size(), 2u);
  for (int e = 0; e < g->num_edges(); ++e) {
    EXPECT_LT(g->topo_position(g->edge(e).src), g->topo_position(g->edge(e).dst));
  }
  EXPECT_EQ(g->FindNode("c"), 2);
  EXPECT_EQ(g->FindNode("zz"), std::nullopt);
}

TEST(GraphTest, ResolvesDefaults) {
  GraphSpec spec;
  spec.nodes = {{.id = "x", .forward_flops = 10, .output_bytes = 64}, {.id = "y"}};
  spec.edges = {{"x", "y"}};
  auto g = Graph::Build(std::move(spec));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->backward_flops(0), 20);
  EXPECT_EQ(g->activation_bytes(0), 64);
  EXPECT_EQ(g->edge(0).bytes, 64);
  EXPECT_EQ(g->weight_grad_fraction(0), 0.5);
}

TEST(GraphTest, TiedParametersShareAGroup) {
  GraphSpec spec;
  spec.nodes = {{.id = "emb", .param_bytes = 100, .param_key = "wte"},
                {.id = "mid", .param_bytes = 10},
                {.id = "head", .param_bytes = 100, .param_key = "wte"},
                {.id = "act"}};
  spec.edges = {{"emb", "mid"}, {"mid", "head"}, {"head", "act"}};
  auto g = Graph::Build(std::move(spec));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->num_param_groups(), 2);
  EXPECT_EQ(g->param_group(0), g->param_group(2));
  EXPECT_NE(g->param_group(0), g->param_group(1));
  EXPECT_EQ(g->param_group(3), -1);
}

TEST(GraphValidationTest, EmptyGraph) {
  ExpectError({}, absl::StatusCode::kInvalidArgument, "graph.nodes is empty");
}

TEST(GraphValidationTest, DuplicateId) {
  GraphSpec g = Diamond();
  g.nodes[2].id = "a";
  ExpectError(g, absl::StatusCode::kInvalidArgument,
              "graph.nodes[2].id \"a\" is duplicated (first at graph.nodes[0])");
}

TEST(GraphValidationTest, EmptyId) {
  GraphSpec g = Diamond();
  g.nodes[1].id = "";
  ExpectError(g, absl::StatusCode::kInvalidArgument, "graph.nodes[1].id is empty");
}

TEST(GraphValidationTest, UnknownNodeInEdge) {
  GraphSpec g = Diamond();
  g.edges[3].dst = "fc9";
  ExpectError(g, absl::StatusCode::kInvalidArgument, "graph.edges[3].dst \"fc9\" is not a node");
  g = Diamond();
  g.edges[1].src = "nope";
  ExpectError(g, absl::StatusCode::kInvalidArgument, "graph.edges[1].src \"nope\" is not a node");
}

TEST(GraphValidationTest, SelfLoop) {
  GraphSpec g = Diamond();
  g.edges.push_back({"b", "b"});
  ExpectError(g, absl::StatusCode::kInvalidArgument, "graph.edges[4] is a self-loop on \"b\"");
}

TEST(GraphValidationTest, CycleNamesItsNodes) {
  GraphSpec g = Diamond();
  g.nodes.push_back({.id = "e"});
  g.edges.push_back({"d", "e"});
  g.edges.push_back({"e", "b"});
  auto built = Graph::Build(g);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(built.status().message(), "graph has a cycle: b -> d -> e -> b");
}

TEST(GraphValidationTest, NegativeAndNonFiniteCosts) {
  GraphSpec g = Diamond();
  g.nodes[1].forward_flops = -1;
  ExpectError(g, absl::StatusCode::kInvalidArgument,
              "graph.nodes[1].forward_flops (\"b\") must be non-negative");
  g = Diamond();
  g.nodes[2].param_bytes = std::nan("");
  ExpectError(g, absl::StatusCode::kInvalidArgument,
              "graph.nodes[2].param_bytes (\"c\") is not a finite number");
  g = Diamond();
  g.nodes[0].output_bytes = std::numeric_limits<double>::infinity();
  ExpectError(g, absl::StatusCode::kInvalidArgument, "graph.nodes[0].output_bytes");
  g = Diamond();
  g.edges[0].bytes = -5;
  ExpectError(g, absl::StatusCode::kInvalidArgument, "graph.edges[0].bytes must be non-negative");
  g = Diamond();
  g.nodes[3].forward_seconds = -0.5;
  ExpectError(g, absl::StatusCode::kInvalidArgument, "graph.nodes[3].forward_seconds");
  g = Diamond();
  g.nodes[3].weight_grad_fraction = 1.5;
  ExpectError(g, absl::StatusCode::kInvalidArgument, "weight_grad_fraction must be in [0, 1]");
  g = Diamond();
  g.batch_size = -1;
  ExpectError(g, absl::StatusCode::kInvalidArgument, "graph.batch_size");
}

TEST(GraphValidationTest, OverLimitSizes) {
  ExpectError(Diamond(), absl::StatusCode::kResourceExhausted,
              "graph.nodes has 4 nodes, over the limit of 3", {.max_nodes = 3});
  ExpectError(Diamond(), absl::StatusCode::kResourceExhausted,
              "graph.edges has 4 edges, over the limit of 2", {.max_edges = 2});
}

}  // namespace
}  // namespace pipeplan
