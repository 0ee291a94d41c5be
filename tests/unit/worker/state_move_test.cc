#include "pipeplan/worker/state_move.h"

#include <gtest/gtest.h>

#include <thread>

#include "pipeplan/worker/in_memory_transport.h"

namespace pipeplan::worker {
namespace {

using Holders = std::map<std::string, std::vector<int>>;
using Blobs = std::map<std::string, std::string>;

// Runs MoveState on `local.size()` members over one MemoryHub.
std::vector<absl::StatusOr<Blobs>> RunAll(const MovePlan& plan, const std::vector<Blobs>& local) {
  const int n = static_cast<int>(local.size());
  MemoryHub hub(n);
  std::vector<absl::StatusOr<Blobs>> out(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Transport> t = hub.Connect(r);
      out[r] = MoveState(*t, plan, local[r], absl::Seconds(5));
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(MovePlan, SourceIsTheLowestOldHolderAndKeptCopiesAreNotResent) {
  auto plan = MovePlan::Build({{"a", {2, 1}}, {"b", {0}}, {"tied", {0, 2}}},
                              {{"a", {0}}, {"b", {0, 1}}, {"tied", {1, 2}}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->items.size(), 3u);
  EXPECT_EQ(plan->items[0].name, "a");
  EXPECT_EQ(plan->items[0].source, 1);
  EXPECT_EQ(plan->items[0].targets, std::vector<int>({0}));
  EXPECT_EQ(plan->items[1].targets, std::vector<int>({1}));  // 0 keeps b
  EXPECT_EQ(plan->items[2].source, 0);
  EXPECT_EQ(plan->items[2].targets, std::vector<int>({1}));  // 2 keeps its tied copy
}

TEST(MovePlan, StateNobodyHoldsIsAnError) {
  auto plan = MovePlan::Build({{"a", {0}}}, {{"a", {1}}, {"ghost", {0}}});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("ghost"), std::string::npos);
}

TEST(MoveState, EveryMemberEndsWithWhatItNeeds) {
  // Three members; a stage boundary moves: layer1 goes 0 -> 1, layer2 1 -> 2,
  // a tied embedding held by 0 and 2 becomes held by 1 and 2, and an empty
  // blob (a parameter-free piece of state) still arrives.
  Holders before = {{"emb", {0, 2}}, {"layer1", {0}}, {"layer2", {1}}, {"empty", {0}}};
  Holders after = {{"emb", {1, 2}}, {"layer1", {1}}, {"layer2", {2}}, {"empty", {2}}};
  auto plan = MovePlan::Build(before, after);
  ASSERT_TRUE(plan.ok());
  std::string big(1 << 20, 'x');
  big[12345] = 'y';
  std::vector<Blobs> local = {
      {{"emb", "E"}, {"layer1", big}, {"empty", ""}}, {{"layer2", "L2"}}, {{"emb", "E"}}};
  auto out = RunAll(*plan, local);
  ASSERT_TRUE(out[0].ok()) << out[0].status();
  ASSERT_TRUE(out[1].ok()) << out[1].status();
  ASSERT_TRUE(out[2].ok()) << out[2].status();
  EXPECT_TRUE(out[0]->empty());
  EXPECT_EQ(*out[1], (Blobs{{"emb", "E"}, {"layer1", big}}));
  EXPECT_EQ(*out[2], (Blobs{{"empty", ""}, {"layer2", "L2"}}));
}

TEST(MoveState, SenderWithoutTheStateFailsBeforeSending) {
  auto plan = MovePlan::Build({{"a", {0}}}, {{"a", {1}}});
  ASSERT_TRUE(plan.ok());
  MemoryHub hub(2);
  std::unique_ptr<Transport> t0 = hub.Connect(0);
  auto r = MoveState(*t0, *plan, {}, absl::Milliseconds(100));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MoveState, MissingPeerTimesOut) {
  auto plan = MovePlan::Build({{"a", {0}}}, {{"a", {1}}});
  ASSERT_TRUE(plan.ok());
  MemoryHub hub(2);
  std::unique_ptr<Transport> t1 = hub.Connect(1);
  auto r = MoveState(*t1, *plan, {}, absl::Milliseconds(100));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace pipeplan::worker
