#include "pipeplan/server/request_cache.h"

#include <gtest/gtest.h>

namespace pipeplan::server {
namespace {

v1::PlanRequest Request(int stages) {
  v1::PlanRequest r;
  r.mutable_graph()->set_name("g");
  auto* n = r.mutable_graph()->add_nodes();
  n->set_id("a");
  n->set_forward_flops(1e9);
  r.mutable_cluster()->add_devices()->set_id("gpu0");
  r.mutable_options()->set_num_ranks(stages);
  return r;
}

std::shared_ptr<const v1::Plan> PlanNamed(const std::string& name) {
  auto p = std::make_shared<v1::Plan>();
  p->set_graph_name(name);
  return p;
}

TEST(RequestCache, CanonicalBytesAreDeterministicAndDistinguishRequests) {
  EXPECT_EQ(CanonicalBytes(Request(2)), CanonicalBytes(Request(2)));
  EXPECT_NE(CanonicalBytes(Request(2)), CanonicalBytes(Request(3)));
  EXPECT_EQ(RequestHash(CanonicalBytes(Request(2))), RequestHash(CanonicalBytes(Request(2))));
}

TEST(RequestCache, HitWithinTtlMissAfter) {
  FakeClock clock;
  RequestCache cache({.ttl = absl::Seconds(10), .max_entries = 4}, &clock);
  const std::string key = CanonicalBytes(Request(2));
  EXPECT_FALSE(cache.Lookup(key).has_value());
  cache.Insert(key, PlanNamed("two"));
  clock.Advance(absl::Seconds(9));
  auto hit = cache.Lookup(key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ((*hit)->graph_name(), "two");
  EXPECT_FALSE(cache.Lookup(CanonicalBytes(Request(3))).has_value());
  clock.Advance(absl::Seconds(2));
  EXPECT_FALSE(cache.Lookup(key).has_value());
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 3u);
}

TEST(RequestCache, EvictsLeastRecentlyUsed) {
  FakeClock clock;
  RequestCache cache({.ttl = absl::Hours(1), .max_entries = 2}, &clock);
  const std::string a = CanonicalBytes(Request(1)), b = CanonicalBytes(Request(2)),
                    c = CanonicalBytes(Request(3));
  cache.Insert(a, PlanNamed("a"));
  cache.Insert(b, PlanNamed("b"));
  ASSERT_TRUE(cache.Lookup(a).has_value());  // a is now the most recent
  cache.Insert(c, PlanNamed("c"));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.Lookup(a).has_value());
  EXPECT_FALSE(cache.Lookup(b).has_value());
  EXPECT_TRUE(cache.Lookup(c).has_value());
}

TEST(RequestCache, OversizedRequestsAreNotCached) {
  FakeClock clock;
  RequestCache cache({.ttl = absl::Hours(1), .max_entries = 8, .max_request_bytes = 4}, &clock);
  const std::string key = CanonicalBytes(Request(2));
  cache.Insert(key, PlanNamed("big"));
  EXPECT_FALSE(cache.Lookup(key).has_value());
}

}  // namespace
}  // namespace pipeplan::server
