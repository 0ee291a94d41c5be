// Timelines: the Chrome trace of a simulated schedule has one track per
// rank and every action once; measured reports turn into the same spans.
#include "pipeplan/core/chrome_trace.h"

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pipeplan/core/schedule/build.h"
#include "pipeplan/core/schedule/lowering.h"
#include "pipeplan/core/schedule/simulator.h"

namespace pipeplan {
namespace {

using schedule::ScheduleKind;

schedule::SimulationResult Simulated(ScheduleKind kind, int ranks, int mb, int chunks,
                                     schedule::PipelineSchedule* lowered) {
  auto s = schedule::BuildSchedule(kind, ranks, mb, chunks);
  EXPECT_TRUE(s.ok()) << s.status();
  auto l = schedule::InsertSendRecv(*s);
  EXPECT_TRUE(l.ok()) << l.status();
  *lowered = *l;
  auto costs = schedule::StageCosts::Uniform(l->num_stages, 1, 1, 1);
  costs.forward_transfer.assign(l->num_stages - 1, 0.25);
  costs.backward_transfer.assign(l->num_stages - 1, 0.25);
  auto sim = schedule::Simulate(*l, costs, {.record_timeline = true});
  EXPECT_TRUE(sim.ok()) << sim.status();
  return *sim;
}

TEST(ChromeTrace, OneTrackPerRankEveryActionOnce) {
  for (auto [kind, chunks] :
       {std::pair{ScheduleKind::k1F1B, 1}, std::pair{ScheduleKind::kInterleaved1F1B, 2}}) {
    schedule::PipelineSchedule lowered;
    const auto sim = Simulated(kind, 4, 8, chunks, &lowered);
    const std::string json = FormatChromeTrace(SpansOfSimulation(sim), 4, "predicted");
    // Every process names a rank; every event's name appears once per rank.
    std::set<int> pids;
    std::map<std::string, int> names;
    const std::regex event(R"re("ph":"X","pid":(\d+),"tid":\d,"name":"([^"]+)")re");
    for (auto it = std::sregex_iterator(json.begin(), json.end(), event);
         it != std::sregex_iterator(); ++it) {
      pids.insert(std::stoi((*it)[1]));
      ++names[(*it)[2]];
    }
    EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
    int actions = 0;
    for (const auto& p : lowered.programs) {
      for (const auto& a : p) actions += a.has_value();
    }
    int events = 0;
    for (const auto& [name, count] : names) {
      EXPECT_EQ(count, 1) << name;
      events += count;
    }
    EXPECT_EQ(events, actions);
    EXPECT_NE(json.find("\"name\":\"F s0 mb0\""), std::string::npos);
    EXPECT_NE(json.find("\"process_name\""), std::string::npos);
    EXPECT_EQ(std::count(json.begin(), json.end(), '{'), std::count(json.begin(), json.end(), '}'));
  }
}

TEST(ChromeTrace, MeasuredSpansFollowWallClock) {
  StepSample r0{.worker_id = "w0", .step = 3, .timings = {}, .rank = 0, .start_unix_us = 1'000'000};
  r0.timings.push_back({.action = "0F0", .seconds = 0.002, .start_seconds = 0});
  r0.timings.push_back({.action = "0SEND_F0",
                        .seconds = 0.0001,
                        .start_seconds = 0.002,
                        .post_unix_us = 1'002'000,
                        .complete_unix_us = 1'004'000});
  StepSample r1{.worker_id = "w1", .step = 3, .timings = {}, .rank = 1, .start_unix_us = 1'000'500};
  r1.timings.push_back({.action = "1RECV_F0",
                        .seconds = 0.003,
                        .start_seconds = 0,
                        .post_unix_us = 1'000'500,
                        .complete_unix_us = 1'003'500,
                        .wait_seconds = 0.003});
  r1.timings.push_back({.action = "1F0", .seconds = 0.002, .start_seconds = 0.003});
  const std::vector<StepSample> step = {r1, r0};
  auto spans = SpansOfReports(step);
  ASSERT_TRUE(spans.ok()) << spans.status();
  ASSERT_EQ(spans->size(), 4u);
  EXPECT_EQ((*spans)[0].rank, 0);
  EXPECT_EQ(SpanName((*spans)[0].action), "F s0 mb0");
  EXPECT_NEAR((*spans)[3].start, 0.0035, 1e-9);  // rank 1 started 0.5 ms later
  EXPECT_NEAR((*spans)[2].end, 0.0035, 1e-9);    // RECV completed at 3.5 ms
  const std::string gantt = FormatGantt(*spans, 2, 20);
  EXPECT_NE(gantt.find("rank  0 |F"), std::string::npos) << gantt;

  r0.rank = 1;
  const std::vector<StepSample> twice = {r0, r1};
  EXPECT_EQ(SpansOfReports(twice).status().code(), absl::StatusCode::kInvalidArgument);
}

// Two data-parallel replicas report the same ranks: each (replica, rank) is
// a lane of its own, in the trace and in the Gantt picture.
TEST(ChromeTrace, ReplicasAreLanesOfTheirOwn) {
  std::vector<StepSample> step;
  for (int q = 0; q < 2; ++q) {
    for (int r = 0; r < 2; ++r) {
      StepSample s{.worker_id = absl::StrCat("w", q, r), .step = 5, .timings = {}, .rank = r};
      s.replica = q;
      s.start_unix_us = 1'000'000;
      s.timings.push_back({.action = absl::StrCat(r, "F0"),
                           .seconds = 0.001 * (q + 1),
                           .start_seconds = 0.001 * r});
      step.push_back(s);
    }
  }
  auto spans = SpansOfReports(step);
  ASSERT_TRUE(spans.ok()) << spans.status();
  ASSERT_EQ(spans->size(), 4u);
  EXPECT_EQ((*spans)[2].replica, 1);
  EXPECT_EQ(SpanLane((*spans)[3], 2), 3);
  const std::string json = FormatChromeTrace(*spans, 2, "replicas");
  EXPECT_NE(json.find("\"replica 1 rank 0\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"pid\":3"), std::string::npos) << json;
  const std::string gantt = FormatGantt(*spans, 2, 20);
  EXPECT_NE(gantt.find("q1 rank  1 |"), std::string::npos) << gantt;
  EXPECT_EQ(std::count(gantt.begin(), gantt.end(), '\n'), 5) << gantt;  // 4 lanes + axis

  step[3].replica = 0;  // two reports of replica 0 rank 1
  EXPECT_EQ(SpansOfReports(step).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pipeplan
