// The wire <-> core conversion of requests and plans (proto_convert.h).
#include "pipeplan/convert/proto_convert.h"

#include <gtest/gtest.h>

#include "support/test_data.h"

namespace pipeplan {
namespace {

v1::PlanOptions OptionsFromJson(const std::string& json) {
  v1::PlanOptions o;
  EXPECT_TRUE(ParseJson(json, &o).ok()) << json;
  return o;
}

// PlanOptions.num_stages is the deprecated name of num_ranks: clients that
// still send it (binary field 1 or JSON "num_stages"/"numStages") get the
// same ranks, and a request naming both with different values is refused.
TEST(PlanOptionsFromProto, ReadsNumStagesAsADeprecatedAliasOfNumRanks) {
  for (const char* json : {R"({"num_ranks": 4})", R"({"num_stages": 4})", R"({"numStages": 4})",
                           R"({"num_ranks": 4, "num_stages": 4})"}) {
    absl::StatusOr<PlanOptions> o = PlanOptionsFromProto(OptionsFromJson(json));
    ASSERT_TRUE(o.ok()) << json << ": " << o.status();
    EXPECT_EQ(o->num_ranks, 4) << json;
  }
  absl::StatusOr<PlanOptions> both =
      PlanOptionsFromProto(OptionsFromJson(R"({"num_ranks": 4, "num_stages": 2})"));
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(both.status().message().find("options.num_ranks"), std::string::npos);
}

// Sizes in the options are bounded where the request is read, with the
// field named, so no product of them overflows in the planner.
TEST(PlanOptionsFromProto, BoundsChunksPerRank) {
  v1::PlanOptions o;
  o.set_chunks_per_rank(8 << 20);
  EXPECT_TRUE(PlanOptionsFromProto(o).ok());
  o.set_chunks_per_rank(2147483647);
  absl::StatusOr<PlanOptions> big = PlanOptionsFromProto(o);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("options.chunks_per_rank is 2147483647; at most 8388608"),
            std::string::npos)
      << big.status();
}

// Alternatives carry their ranks under both names, so readers written
// against the old field keep seeing them.
TEST(PlanToProto, AlternativesCarryRanksUnderBothNames) {
  v1::PlanRequest req;
  *req.mutable_graph() = testing::ReadJson<v1::ModelGraph>("chain_small.json");
  *req.mutable_cluster() = testing::ReadJson<v1::ClusterTopology>("cluster_8xa100.json");
  req.mutable_options()->set_schedule(v1::SCHEDULE_1F1B);
  req.mutable_options()->set_method(v1::METHOD_DP);
  absl::StatusOr<PlanInputs> in = PlanInputs::FromRequest(req);
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<PlanResult> result = MakePlan(*in->graph, *in->cluster, in->options);
  ASSERT_TRUE(result.ok()) << result.status();
  const v1::Plan plan = PlanToProto(*in->graph, *in->cluster, *result);
  ASSERT_GT(plan.alternatives_size(), 0);
  const std::string json = ToJson(plan, /*pretty=*/false);
  for (const v1::Alternative& a : plan.alternatives()) EXPECT_GT(a.num_ranks(), 0);
  EXPECT_NE(json.find("\"num_stages\":" + std::to_string(plan.alternatives(0).num_ranks())),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
