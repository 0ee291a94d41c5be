#include "pipeplan/core/schedule/shared_compute.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "test_util.h"

namespace pipeplan::schedule {
namespace {

using ::testing::HasSubstr;

std::vector<TimelineEvent> ByRankAndStep(std::vector<TimelineEvent> events) {
  std::sort(events.begin(), events.end(), [](const TimelineEvent& a, const TimelineEvent& b) {
    return std::tie(a.rank, a.step) < std::tie(b.rank, b.step);
  });
  return events;
}

void ExpectSameResult(const SimulationResult& want, const SimulationResult& got,
                      const std::string& label) {
  EXPECT_NEAR(got.step_seconds, want.step_seconds, 1e-9) << label;
  EXPECT_NEAR(got.bubble_ratio, want.bubble_ratio, 1e-9) << label;
  ASSERT_EQ(got.busy_seconds.size(), want.busy_seconds.size()) << label;
  for (size_t r = 0; r < want.busy_seconds.size(); ++r) {
    EXPECT_NEAR(got.busy_seconds[r], want.busy_seconds[r], 1e-9) << label << " rank " << r;
    EXPECT_NEAR(got.idle_seconds[r], want.idle_seconds[r], 1e-9) << label << " rank " << r;
    EXPECT_NEAR(got.finish_seconds[r], want.finish_seconds[r], 1e-9) << label << " rank " << r;
  }
  EXPECT_EQ(got.peak_memory_bytes, want.peak_memory_bytes) << label;
  EXPECT_EQ(got.peak_inflight_microbatches, want.peak_inflight_microbatches) << label;
  EXPECT_EQ(got.peak_inflight_per_stage, want.peak_inflight_per_stage) << label;
  const std::vector<TimelineEvent> a = ByRankAndStep(want.timeline);
  const std::vector<TimelineEvent> b = ByRankAndStep(got.timeline);
  ASSERT_EQ(a.size(), b.size()) << label;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].rank, a[i].rank) << label;
    EXPECT_EQ(b[i].step, a[i].step) << label;
    EXPECT_EQ(b[i].action, a[i].action) << label;
    EXPECT_NEAR(b[i].start, a[i].start, 1e-9) << label << " " << ActionToString(a[i].action);
    EXPECT_NEAR(b[i].end, a[i].end, 1e-9) << label << " " << ActionToString(a[i].action);
  }
}

// Times, transfers, host time and memory: every input Simulate reads.
StageCosts RandomCosts(int stages, std::mt19937& rng) {
  StageCosts c = testing::RandomTimes(stages, rng, 0.1, 2.0);
  for (double& t : c.forward_transfer) t *= 0.2;
  for (double& t : c.backward_transfer) t *= 0.2;
  std::uniform_real_distribution<double> host(0, 0.4), bytes(1, 100);
  for (int s = 0; s < stages; ++s) {
    c.param_bytes.push_back(bytes(rng));
    c.activation_bytes.push_back(bytes(rng));
    c.send_host.push_back(host(rng));
    c.recv_host.push_back(host(rng));
  }
  return c;
}

// Random pools (some ranks in none) each with room for all its ranks' loads.
ComputeSharing AmpleSharing(int ranks, std::mt19937& rng) {
  ComputeSharing sharing;
  const int pools = 1 + static_cast<int>(rng() % 3);
  sharing.pool_capacity.assign(pools, 0);
  std::uniform_real_distribution<double> load(0.5, 3);
  for (int r = 0; r < ranks; ++r) {
    const int p = static_cast<int>(rng() % (pools + 1)) - 1;
    sharing.rank_pool.push_back(r == 0 ? 0 : p);
    sharing.rank_load.push_back(load(rng));
    if (sharing.rank_pool.back() >= 0) {
      sharing.pool_capacity[sharing.rank_pool.back()] += sharing.rank_load.back();
    }
  }
  for (double& c : sharing.pool_capacity) c = std::max(c, 1.0) * (1 + (rng() % 2));
  return sharing;
}

struct Labelled {
  std::string label;
  PipelineSchedule schedule;
};

// The built schedules `keep` accepts, each compute-only and lowered.
template <typename Keep>
std::vector<Labelled> Sweep(Keep keep) {
  std::vector<Labelled> out;
  for (testing::BuiltSchedule& built : testing::EveryBuildableSchedule()) {
    if (!keep(built)) continue;
    absl::StatusOr<PipelineSchedule> lowered = InsertSendRecv(built.schedule);
    EXPECT_TRUE(lowered.ok()) << built.label;
    if (lowered.ok()) out.push_back({built.label + " lowered", *std::move(lowered)});
    out.push_back({built.label, std::move(built.schedule)});
  }
  return out;
}

TEST(SharedComputeTest, PoolsWithRoomForEveryRankGiveSimulatesResult) {
  std::mt19937 rng(2024);
  SimulateOptions options;
  options.record_timeline = true;
  // Every microbatch count would take long; these cover m < p, = p and > p.
  const std::vector<Labelled> sweep = Sweep([](const testing::BuiltSchedule& b) {
    return b.microbatches % 3 == 0 || b.microbatches <= 2;
  });
  EXPECT_GT(sweep.size(), 200u);
  for (const auto& [label, s] : sweep) {
    const StageCosts costs = RandomCosts(s.num_stages, rng);
    const ComputeSharing sharing = AmpleSharing(s.num_ranks, rng);
    ASSERT_FALSE(sharing.empty());
    absl::StatusOr<SimulationResult> want = Simulate(s, costs, options);
    absl::StatusOr<SimulationResult> got = SimulateShared(s, costs, sharing, options);
    ASSERT_TRUE(want.ok()) << label << ": " << want.status();
    ASSERT_TRUE(got.ok()) << label << ": " << got.status();
    ExpectSameResult(*want, *got, label);
  }
}

// Seconds of work of a compute (its duration alone).
double Work(const Action& a, const StageCosts& c) {
  switch (a.type) {
    case ActionType::kForward:
      return c.forward[a.stage];
    case ActionType::kBackwardInput:
      return c.backward_input[a.stage];
    case ActionType::kBackwardWeight:
      return c.backward_weight[a.stage];
    case ActionType::kFullBackward:
      return c.backward_input[a.stage] + c.backward_weight[a.stage];
    case ActionType::kOverlapFB:
      return Work(ForwardHalf(a), c) + Work(BackwardHalf(a), c);
    default:
      return 0;
  }
}

// Integrates, from the timeline alone, each compute's rate in its pool
// (min(1, capacity / load of the computes spanning each moment)): what it
// got done must be its work.
void ExpectEveryComputeGotItsWork(const SimulationResult& r, const StageCosts& costs,
                                  const ComputeSharing& sharing, const std::string& label) {
  std::vector<const TimelineEvent*> computes;
  std::vector<double> cuts;
  for (const TimelineEvent& e : r.timeline) {
    if (!IsCompute(e.action.type)) continue;
    computes.push_back(&e);
    cuts.push_back(e.start);
    cuts.push_back(e.end);
  }
  std::sort(cuts.begin(), cuts.end());
  const int pools = static_cast<int>(sharing.pool_capacity.size());
  // load[i * pools + p]: load in pool p between cuts i and i + 1.
  std::vector<double> load((cuts.size() + 1) * pools, 0);
  auto cut = [&](double t) { return std::lower_bound(cuts.begin(), cuts.end(), t) - cuts.begin(); };
  for (const TimelineEvent* e : computes) {
    const int p = sharing.rank_pool[e->rank];
    if (p < 0) continue;
    for (auto i = cut(e->start); i < cut(e->end); ++i)
      load[i * pools + p] += sharing.rank_load[e->rank];
  }
  for (const TimelineEvent* e : computes) {
    const int p = sharing.rank_pool[e->rank];
    double done = 0;
    for (auto i = cut(e->start); i < cut(e->end); ++i) {
      const double rate = p < 0 ? 1 : std::min(1.0, sharing.pool_capacity[p] / load[i * pools + p]);
      done += (cuts[i + 1] - cuts[i]) * rate;
    }
    EXPECT_NEAR(done, Work(e->action, costs), 1e-9) << label << " " << ActionToString(e->action);
  }
}

TEST(SharedComputeTest, ScarceCpusSlowComputesByTheirPoolsLoad) {
  std::mt19937 rng(99);
  SimulateOptions options;
  options.record_timeline = true;
  const std::vector<Labelled> sweep = Sweep([](const testing::BuiltSchedule& b) {
    return b.ranks >= 2 && b.microbatches <= 6 && b.microbatches % 2 == 0;
  });
  EXPECT_GT(sweep.size(), 50u);
  for (const auto& [label, s] : sweep) {
    const StageCosts costs = RandomCosts(s.num_stages, rng);
    ComputeSharing sharing = AmpleSharing(s.num_ranks, rng);
    for (double& c : sharing.pool_capacity) c *= 0.3;
    absl::StatusOr<SimulationResult> alone = Simulate(s, costs);
    absl::StatusOr<SimulationResult> shared = SimulateShared(s, costs, sharing, options);
    ASSERT_TRUE(alone.ok() && shared.ok()) << label << ": " << shared.status();
    ExpectEveryComputeGotItsWork(*shared, costs, sharing, label);
    // Every duration is at least its work and orders are fixed, so no event
    // can come earlier than with a processor per rank.
    EXPECT_GE(shared->step_seconds, alone->step_seconds - 1e-9) << label;
    for (int r = 0; r < s.num_ranks; ++r) {
      EXPECT_GE(shared->busy_seconds[r], alone->busy_seconds[r] - 1e-9) << label;
      EXPECT_GE(shared->finish_seconds[r], alone->finish_seconds[r] - 1e-9) << label;
    }
  }
}

TEST(SharedComputeTest, EmptySharingIsSimulate) {
  absl::StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::kInterleaved1F1B, 3, 6, 2);
  ASSERT_TRUE(s.ok());
  std::mt19937 rng(5);
  const StageCosts costs = RandomCosts(s->num_stages, rng);
  absl::StatusOr<SimulationResult> want = Simulate(*s, costs);
  for (const ComputeSharing& sharing :
       {ComputeSharing{}, ComputeSharing{{-1, -1, -1}, {1, 1, 1}, {}}}) {
    EXPECT_TRUE(sharing.empty());
    absl::StatusOr<SimulationResult> got = SimulateShared(*s, costs, sharing);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameResult(*want, *got, "empty");
  }
}

// Two ranks, F = 1 and B = 2 (I = 1, W = 1) alone: 0F0 runs alone on [0, 1],
// then 0F1 and 1F0 run together; 1F1 and then 1B0 alone; 1B1 and 0B0
// together; 0B1 alone.
const PipelineSchedule& TwoRanks() {
  static const PipelineSchedule s =
      testing::MakeSchedule({0, 1}, 2, {"0F0,0F1,0B0,0B1", "1F0,1F1,1B0,1B1"});
  return s;
}

SimulationResult RunTwoRanks(const ComputeSharing& sharing) {
  SimulateOptions options;
  options.record_timeline = true;
  absl::StatusOr<SimulationResult> r =
      SimulateShared(TwoRanks(), StageCosts::Uniform(2, 1, 1, 1), sharing, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimulationResult{};
}

// [start, end] of `action` in the timeline.
std::pair<double, double> Span(const SimulationResult& r, const std::string& action) {
  for (const TimelineEvent& e : r.timeline) {
    if (ActionToString(e.action) == action) return {e.start, e.end};
  }
  ADD_FAILURE() << action << " not in the timeline";
  return {-1, -1};
}

TEST(SharedComputeTest, TwoRanksOnOneCpuEachTakeTwiceAsLongWhileTheyOverlap) {
  const SimulationResult r = RunTwoRanks({{0, 0}, {1, 1}, {1}});
  EXPECT_EQ(Span(r, "0F0"), std::make_pair(0.0, 1.0));
  EXPECT_EQ(Span(r, "0F1"), std::make_pair(1.0, 3.0));
  EXPECT_EQ(Span(r, "1F0"), std::make_pair(1.0, 3.0));
  EXPECT_EQ(Span(r, "1F1"), std::make_pair(3.0, 4.0));
  EXPECT_EQ(Span(r, "1B0"), std::make_pair(4.0, 6.0));
  EXPECT_EQ(Span(r, "1B1"), std::make_pair(6.0, 10.0));
  EXPECT_EQ(Span(r, "0B0"), std::make_pair(6.0, 10.0));
  EXPECT_EQ(Span(r, "0B1"), std::make_pair(10.0, 12.0));
  EXPECT_DOUBLE_EQ(r.step_seconds, 12);
  EXPECT_DOUBLE_EQ(r.busy_seconds[0], 1 + 2 + 4 + 2);
  EXPECT_DOUBLE_EQ(r.busy_seconds[1], 2 + 1 + 2 + 4);
  EXPECT_DOUBLE_EQ(r.finish_seconds[1], 10);
  EXPECT_DOUBLE_EQ(r.bubble_ratio, (3.0 + 3.0) / (2 * 12));
}

// End work (a CPU worker's gradient all-reduce) shares the pool like a
// compute: rank 1's second of it runs beside 0B1 from 10 on, both at half
// speed, so it ends at 12 and 0B1 at 13; rank 0's half second then runs
// alone. The step (computes) ends at 13.
TEST(SharedComputeTest, EndWorkSlowsTheRanksStillComputing) {
  const SimulationResult r = RunTwoRanks({{0, 0}, {1, 1}, {1}, {0.5, 1}});
  EXPECT_EQ(Span(r, "0B1"), std::make_pair(10.0, 13.0));
  EXPECT_DOUBLE_EQ(r.finish_seconds[0], 13);
  EXPECT_DOUBLE_EQ(r.finish_seconds[1], 10);
  EXPECT_THAT(r.end_work_finish_seconds, ::testing::ElementsAre(13.5, 12.0));
  EXPECT_DOUBLE_EQ(r.step_seconds, 13);
  EXPECT_DOUBLE_EQ(r.busy_seconds[0], 1 + 2 + 4 + 3);
  // Without a pool each rank's end work runs at full speed after it.
  const SimulationResult own = RunTwoRanks({{}, {}, {}, {0.5, 1}});
  EXPECT_THAT(own.end_work_finish_seconds, ::testing::ElementsAre(9.5, 8.0));
  // None: no end times.
  EXPECT_TRUE(RunTwoRanks({{0, 0}, {1, 1}, {1}}).end_work_finish_seconds.empty());
  // End work at half a compute's load: 0B1 and rank 1's end work share the
  // CPU at a load of 1.5 (each at 2/3 speed) until 11.5; 0B1's last second
  // runs alone to 12.5, and rank 0's end work (load 0.5) at full speed.
  const SimulationResult half = RunTwoRanks({{0, 0}, {1, 1}, {1}, {0.5, 1}, 0.5});
  EXPECT_DOUBLE_EQ(half.finish_seconds[0], 12.5);
  EXPECT_THAT(half.end_work_finish_seconds, ::testing::ElementsAre(13.0, 11.5));
}

TEST(SharedComputeTest, OneAndAHalfCpusForTwoRanksRunEachAtThreeQuarters) {
  const SimulationResult r = RunTwoRanks({{0, 0}, {1, 1}, {1.5}});
  EXPECT_DOUBLE_EQ(Span(r, "0F1").second, 1 + 1 / 0.75);
  EXPECT_DOUBLE_EQ(Span(r, "1F0").second, 1 + 1 / 0.75);
  // 1B1 and 0B0 (2 seconds of work each) start together.
  const auto [start, end] = Span(r, "0B0");
  EXPECT_DOUBLE_EQ(end - start, 2 / 0.75);
  EXPECT_EQ(Span(r, "1B1"), std::make_pair(start, end));
}

TEST(SharedComputeTest, ALoadOfTwoAloneOnOneCpuRunsAtHalfSpeed) {
  // Rank 0 stands for two replicas on one CPU; rank 1 has a processor.
  const SimulationResult r = RunTwoRanks({{0, -1}, {2, 1}, {1}});
  EXPECT_EQ(Span(r, "0F0"), std::make_pair(0.0, 2.0));
  EXPECT_EQ(Span(r, "0F1"), std::make_pair(2.0, 4.0));
  EXPECT_EQ(Span(r, "1F0"), std::make_pair(2.0, 3.0));
  EXPECT_DOUBLE_EQ(r.busy_seconds[0], 2 * (1 + 1 + 2 + 2));
  EXPECT_DOUBLE_EQ(r.busy_seconds[1], 1 + 1 + 2 + 2);
}

TEST(SharedComputeTest, APoolOfOneRankChangesNothing) {
  absl::StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::k1F1B, 3, 5, 1);
  ASSERT_TRUE(s.ok());
  std::mt19937 rng(11);
  const StageCosts costs = RandomCosts(3, rng);
  SimulateOptions options;
  options.record_timeline = true;
  absl::StatusOr<SimulationResult> want = Simulate(*s, costs, options);
  absl::StatusOr<SimulationResult> got =
      SimulateShared(*s, costs, {{-1, 0, -1}, {1, 1, 1}, {1}}, options);
  ASSERT_TRUE(want.ok() && got.ok());
  ExpectSameResult(*want, *got, "one rank in the pool");
}

TEST(SharedComputeTest, ARankOutsideThePoolKeepsItsSpeed) {
  absl::StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::kGPipe, 3, 6, 1);
  ASSERT_TRUE(s.ok());
  const StageCosts costs = StageCosts::Uniform(3, 1, 1, 1);
  SimulateOptions options;
  options.record_timeline = true;
  absl::StatusOr<SimulationResult> r =
      SimulateShared(*s, costs, {{0, 0, -1}, {1, 1, 1}, {1}}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  int stretched = 0;
  for (const TimelineEvent& e : r->timeline) {
    const double work = e.action.type == ActionType::kForward ? 1 : 2;
    if (e.rank == 2) {
      EXPECT_NEAR(e.end - e.start, work, 1e-12) << ActionToString(e.action);
    } else if (e.end - e.start > work + 1e-9) {
      ++stretched;
    }
  }
  EXPECT_GT(stretched, 0);  // the pool was busy with both its ranks
  EXPECT_NEAR(r->busy_seconds[2], 6 * 3, 1e-9);
}

// 4 ranks x 4 microbatches, F = I = W = 1 (12 seconds of work per rank, 48
// in all) on 2 CPUs. Simulate's 21 seconds need 4 CPUs in the steady state;
// 2 CPUs cannot do 48 seconds of work in less than 24. Up to the end some
// compute always runs (no transfers, so a compute whose inputs exist starts)
// at total rate >= 1, so 48 is an upper bound, reached only if computes
// never overlapped, which 1F1B's steady state does.
TEST(SharedComputeTest, OneFOneBOnTwoCpusIsBetweenSimulateAndSerial) {
  absl::StatusOr<PipelineSchedule> s = BuildSchedule(ScheduleKind::k1F1B, 4, 4, 1);
  ASSERT_TRUE(s.ok());
  const StageCosts costs = StageCosts::Uniform(4, 1, 1, 1);
  absl::StatusOr<SimulationResult> alone = Simulate(*s, costs);
  absl::StatusOr<SimulationResult> shared =
      SimulateShared(*s, costs, {{0, 0, 0, 0}, {1, 1, 1, 1}, {2}});
  ASSERT_TRUE(alone.ok() && shared.ok()) << shared.status();
  EXPECT_DOUBLE_EQ(alone->step_seconds, 21);
  EXPECT_GE(shared->step_seconds, 24 - 1e-9);
  EXPECT_LT(shared->step_seconds, 48);
  double busy = 0;
  for (double b : shared->busy_seconds) {
    EXPECT_GE(b, 12 - 1e-9);
    busy += b;
  }
  EXPECT_GT(busy, 48);
  EXPECT_EQ(shared->peak_inflight_microbatches, alone->peak_inflight_microbatches);
}

TEST(SharedComputeTest, RejectsASharingThatDoesNotFit) {
  const PipelineSchedule& s = TwoRanks();
  const StageCosts costs = StageCosts::Uniform(2, 1, 1, 1);
  const std::vector<std::pair<ComputeSharing, std::string>> bad = {
      {{{0}, {1}, {1}}, "rank_pool has 1 entries for 2 ranks"},
      {{{0, 0}, {1}, {1}}, "rank_load has 1 entries for 2 ranks"},
      {{{0, -1}, {}, {1}}, "rank_load has 0 entries for 2 ranks"},
      {{{0, 0}, {1, 1}, {0}}, "pool 0 has capacity 0"},
      {{{0, 0}, {1, 1}, {-2}}, "pool 0 has capacity -2"},
      {{{0, 0}, {1, 1}, {std::numeric_limits<double>::quiet_NaN()}}, "pool 0 has capacity nan"},
      {{{0, 0}, {1, 0}, {1}}, "rank 1 has load 0"},
      {{{0, 0}, {1, -1}, {1}}, "rank 1 has load -1"},
      {{{0, 1}, {1, 1}, {1}}, "rank 1 is in pool 1"},
      {{{0, -2}, {1, 1}, {1}}, "rank 1 is in pool -2"},
      {{{-1}, {}, {}}, "rank_pool has 1 entries for 2 ranks"},  // empty(), still wrong
      {{{0, 0}, {1, 1}, {1}, {1}}, "rank_end_seconds has 1 entries for 2 ranks"},
      {{{0, 0}, {1, 1}, {1}, {0, -1}}, "rank 1 has end work -1"},
      {{{}, {}, {}, {std::numeric_limits<double>::infinity(), 0}}, "rank 0 has end work inf"},
      {{{0, 0}, {1, 1}, {1}, {}, 0}, "end_work_load is 0"},
  };
  for (const auto& [sharing, why] : bad) {
    EXPECT_FALSE(CheckComputeSharing(sharing, 2).ok()) << why;
    absl::StatusOr<SimulationResult> r = SimulateShared(s, costs, sharing);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(why));
  }
  EXPECT_TRUE(CheckComputeSharing({{0, -1}, {1, 1}, {1, 3}}, 2).ok());
  EXPECT_TRUE(CheckComputeSharing({{}, {1, 1}, {}}, 2).ok());
}

TEST(SharedComputeTest, ReportsErrorsInSimulatesOrder) {
  const ComputeSharing bad_sharing{{0}, {1}, {1}};
  const ComputeSharing good_sharing{{0, 0}, {1, 1}, {1}};
  // Costs before sharing.
  absl::StatusOr<SimulationResult> r =
      SimulateShared(TwoRanks(), StageCosts::Uniform(3, 1, 1, 1), bad_sharing);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("forward has 3 entries, want 2"));
  // A deadlock, with or without a pool, is Simulate's error.
  // (And so is a structural error.)
  const PipelineSchedule no_recv =
      testing::MakeSchedule({0, 1}, 1, {"0F0,0SEND_F0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0"});
  const PipelineSchedule b_first =
      testing::MakeSchedule({0, 1}, 1, {"0F0,0SEND_F0,0RECV_B0,0B0", "1B0,1RECV_F0,1F0,1SEND_B0"});
  // Rank 0 waits at RECV_B0 for a gradient that needs its own SEND_F0: a
  // deadlock for Simulate, whose RECV holds the program.
  const PipelineSchedule recv_first =
      testing::MakeSchedule({0, 1}, 1, {"0F0,0RECV_B0,0SEND_F0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0"});
  for (const PipelineSchedule* s : {&no_recv, &b_first, &recv_first}) {
    const StageCosts costs = StageCosts::Uniform(2, 1, 1, 1);
    absl::StatusOr<SimulationResult> want = Simulate(*s, costs);
    ASSERT_FALSE(want.ok());
    for (const ComputeSharing& sharing : {good_sharing, ComputeSharing{}}) {
      r = SimulateShared(*s, costs, sharing);
      EXPECT_EQ(r.status(), want.status());
    }
  }
}

}  // namespace
}  // namespace pipeplan::schedule
