// Cut granularity: which nodes share a group, and that every partition
// method keeps groups whole.
#include "pipeplan/core/cut_groups.h"

#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/planner.h"
#include "support/test_data.h"

namespace pipeplan {
namespace {

using schedule::ScheduleKind;

PlanInputs Load(const std::string& graph, const std::string& cluster) {
  v1::PlanRequest req;
  *req.mutable_graph() = testing::ReadJson<v1::ModelGraph>(graph);
  *req.mutable_cluster() = testing::ReadJson<v1::ClusterTopology>(cluster);
  auto in = PlanInputs::FromRequest(req);
  EXPECT_TRUE(in.ok()) << in.status();
  return std::move(*in);
}

TEST(CutGroups, ParsesGranularities) {
  EXPECT_EQ(ParseCutGranularity("")->kind, CutGranularity::Kind::kNode);
  EXPECT_EQ(ParseCutGranularity("node")->kind, CutGranularity::Kind::kNode);
  EXPECT_EQ(ParseCutGranularity("layer")->kind, CutGranularity::Kind::kLayer);
  EXPECT_EQ(ParseCutGranularity("module:3")->depth, 3);
  for (const char* bad : {"module", "module:0", "module:x", "blocks"}) {
    auto g = ParseCutGranularity(bad);
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_THAT(std::string(g.status().message()), ::testing::HasSubstr("options.cut_granularity"));
  }
}

TEST(CutGroups, KeysFollowModulePaths) {
  PlanInputs in = Load("gpt_1k.json", "cluster_8xa100.json");
  const Graph& g = *in.graph;
  const int q = *g.FindNode("transformer.h.3.attn.q_proj");
  const int wte = *g.FindNode("transformer.wte");
  EXPECT_EQ(CutGroupKey(g, q, *ParseCutGranularity("module:3")), "transformer.h.3");
  EXPECT_EQ(CutGroupKey(g, q, *ParseCutGranularity("module:4")), "transformer.h.3.attn");
  EXPECT_EQ(CutGroupKey(g, q, *ParseCutGranularity("layer")), "transformer.h.3");
  // Shallower than the depth: its own group.
  EXPECT_EQ(CutGroupKey(g, wte, *ParseCutGranularity("module:3")), "transformer.wte");
  EXPECT_EQ(CutGroupKey(g, wte, *ParseCutGranularity("layer")), "transformer.wte");
}

// Every stage boundary falls between groups.
void ExpectGroupsWhole(const Graph& g, const std::vector<int>& stage_of_node,
                       const CutGranularity& granularity, const std::string& what) {
  std::map<std::string, int> stage_of_group;
  for (int v = 0; v < g.num_nodes(); ++v) {
    auto [it, inserted] = stage_of_group.emplace(CutGroupKey(g, v, granularity), stage_of_node[v]);
    EXPECT_EQ(it->second, stage_of_node[v]) << what << ": " << g.node(v).id;
  }
}

TEST(CutGroups, EveryMethodCutsOnlyBetweenLayers) {
  PlanInputs in = Load("gpt_1k.json", "cluster_8xa100.json");
  const CutGranularity layer = *ParseCutGranularity("layer");
  for (PartitionMethod method :
       {PartitionMethod::kAuto, PartitionMethod::kDp, PartitionMethod::kIdealDp,
        PartitionMethod::kMilp, PartitionMethod::kUniform, PartitionMethod::kParams,
        PartitionMethod::kTime}) {
    auto plan = MakePlan(*in.graph, *in.cluster,
                         {.num_ranks = 4,
                          .num_replicas = 1,
                          .microbatches = 8,
                          .cut_granularity = "layer",
                          .schedule = ScheduleKind::k1F1B,
                          .method = method,
                          .time_limit_seconds = 5});
    ASSERT_TRUE(plan.ok()) << PartitionMethodName(method) << ": " << plan.status();
    ExpectGroupsWhole(*in.graph, plan->partition.stage_of_node, layer,
                      std::string(PartitionMethodName(method)));
  }
  // The node-level plan of the same request does cut inside a block: the
  // granularity is what kept them whole.
  auto free = MakePlan(*in.graph, *in.cluster,
                       {.num_ranks = 4,
                        .num_replicas = 1,
                        .microbatches = 8,
                        .schedule = ScheduleKind::k1F1B,
                        .method = PartitionMethod::kDp});
  ASSERT_TRUE(free.ok());
  std::map<std::string, std::set<int>> stages_of_group;
  for (int v = 0; v < in.graph->num_nodes(); ++v) {
    stages_of_group[CutGroupKey(*in.graph, v, layer)].insert(free->partition.stage_of_node[v]);
  }
  int split_groups = 0;
  for (const auto& [key, stages] : stages_of_group) split_groups += stages.size() > 1;
  EXPECT_GT(split_groups, 0);
}

TEST(CutGroups, GroupedGraphSumsCostsAndKeepsTiedParameters) {
  PlanInputs in = Load("gpt_1k.json", "cluster_8xa100.json");
  auto grouped = GroupForCuts(*in.graph, *ParseCutGranularity("module:3"), in.cluster->max_flops());
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  const Graph& q = *grouped->graph;
  EXPECT_LT(q.num_nodes(), in.graph->num_nodes());
  // Evaluating a split of the grouped graph expanded to the graph costs the
  // same compute and memory (the layers here share no parameters).
  const CostModel original(*in.graph, *in.cluster, {});
  const CostModel merged(q, *in.cluster, {});
  std::vector<int> split(q.num_nodes());
  for (int v = 0; v < q.num_nodes(); ++v) split[q.topo_position(v)] = 0;
  for (int i = q.num_nodes() / 2; i < q.num_nodes(); ++i) split[q.topo_order()[i]] = 1;
  auto a = merged.Evaluate(split, std::vector<int>{0, 1});
  auto b = original.Evaluate(grouped->Expand(split), std::vector<int>{0, 1});
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR((*a)[s].compute_seconds(), (*b)[s].compute_seconds(),
                1e-9 * (*b)[s].compute_seconds());
    EXPECT_NEAR((*a)[s].activation_bytes, (*b)[s].activation_bytes,
                1e-6 * (*b)[s].activation_bytes + 1e-6 * q.num_nodes());
    EXPECT_NEAR((*a)[s].param_bytes, (*b)[s].param_bytes, 1e-6 * (*b)[s].param_bytes);
  }
}

TEST(CutGroups, RefusesGroupsThatCannotBeWhole) {
  // a.x -> b -> a.y: module "a" would have to sit both before and after b.
  GraphSpec spec;
  spec.nodes = {{.id = "a.x", .forward_flops = 1},
                {.id = "b", .forward_flops = 1},
                {.id = "a.y", .forward_flops = 1}};
  spec.edges = {{"a.x", "b"}, {"b", "a.y"}};
  auto g = Graph::Build(std::move(spec));
  ASSERT_TRUE(g.ok());
  auto grouped = GroupForCuts(*g, *ParseCutGranularity("module:1"), 1e12);
  ASSERT_FALSE(grouped.ok());
  EXPECT_EQ(grouped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(grouped.status().message()),
              ::testing::HasSubstr("options.cut_granularity"));
}

}  // namespace
}  // namespace pipeplan
