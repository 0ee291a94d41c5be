#include "pipeplan/server/solve/request_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// A plan whose node_stage has `nodes` entries: about 4 bytes each in memory.
std::shared_ptr<const v1::Plan> PlanOfNodes(int nodes) {
  auto p = std::make_shared<v1::Plan>();
  for (int i = 0; i < nodes; ++i) p->add_node_stage(i % 4);
  return p;
}

// Large distinct plans cannot grow the cache past its byte bound, whatever
// the entry count allows.
TEST(RequestCache, BoundedByBytes) {
  FakeClock clock;
  const size_t max_bytes = 1 << 20;
  RequestCache cache({.ttl = absl::Hours(1), .max_entries = 1000, .max_bytes = max_bytes}, &clock);
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(CanonicalBytes(Request(i + 1)));
    cache.Insert(keys.back(), PlanOfNodes(25'000));  // ~100 KB each
    EXPECT_LE(cache.bytes(), max_bytes);
  }
  EXPECT_GT(cache.bytes(), max_bytes / 2);
  EXPECT_LT(cache.size(), 11u);
  EXPECT_GE(cache.size(), 5u);
  // The newest stay, the oldest went.
  EXPECT_TRUE(cache.Lookup(keys.back()).has_value());
  EXPECT_FALSE(cache.Lookup(keys.front()).has_value());
  // An entry larger than the whole bound is not kept (and evicts nothing).
  const size_t before = cache.size();
  cache.Insert(CanonicalBytes(Request(999)), PlanOfNodes(300'000));
  EXPECT_FALSE(cache.Lookup(CanonicalBytes(Request(999))).has_value());
  EXPECT_EQ(cache.size(), before);
  // Expired and replaced entries give their bytes back.
  clock.Advance(absl::Hours(2));
  for (const std::string& k : keys) (void)cache.Lookup(k);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

}  // namespace
}  // namespace pipeplan::server
