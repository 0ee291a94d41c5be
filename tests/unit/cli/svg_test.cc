// The --svg pictures of `pipeplan simulate`, `plan` and `jobs trace`: each is
// well-formed XML with one lane per rank and one box per action of the
// lowered schedule, one band per stage, text escaped; rsvg-convert (Debian's
// librsvg2-bin), when on PATH, renders each to a PNG of the picture's size.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "cli.h"
#include "jobs_trace_command.h"
#include "output_file.h"
#include "pipeplan/convert/proto_convert.h"
#include "pipeplan/core/schedule/action.h"
#include "plan_svg.h"
#include "simulate_command.h"
#include "support/temp_dir.h"
#include "support/test_data.h"
#include "support/xml_reader.h"
#include "svg_writer.h"

namespace pipeplan::cli {
namespace {

using ::pipeplan::testing::DataPath;
using ::pipeplan::testing::TempDir;
using ::pipeplan::testing::XmlElement;
using ::pipeplan::testing::XmlReader;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

XmlElement ParseSvg(const std::string& text) {
  absl::StatusOr<XmlElement> root = XmlReader::Parse(text);
  EXPECT_TRUE(root.ok()) << root.status();
  if (!root.ok()) return {};
  EXPECT_EQ(root->name, "svg");
  return *std::move(root);
}

bool HasClass(const XmlElement& e, const std::string& cls) {
  for (absl::string_view c : absl::StrSplit(e.Attr("class"), ' ')) {
    if (c == cls) return true;
  }
  return false;
}

std::vector<const XmlElement*> WithClass(const XmlElement& root, const std::string& cls) {
  return root.FindAll([&](const XmlElement& e) { return HasClass(e, cls); });
}

// The plan `pipeplan plan` prints for gpt_1k on four mixed devices, 1F1B.
std::vector<std::string> PlanArgs() {
  return {"plan",
          "--graph",
          DataPath("gpt_1k.json"),
          "--cluster",
          DataPath("cluster_4_mixed.json"),
          "--ranks",
          "4",
          "--schedule",
          "1F1B",
          "--microbatches",
          "8"};
}

v1::Plan PlanOfGpt1k(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = PlanArgs();
  args.insert(args.end(), {"-o", "json"});
  args.insert(args.end(), extra.begin(), extra.end());
  ::testing::internal::CaptureStdout();
  const int code = RunCli(args);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0) << out;
  v1::Plan plan;
  EXPECT_TRUE(ParseJson(out, &plan).ok()) << out;
  return plan;
}

Graph Gpt1kGraph() {
  v1::ModelGraph proto = ::pipeplan::testing::ReadJson<v1::ModelGraph>("gpt_1k.json");
  absl::StatusOr<Graph> graph = Graph::Build(GraphSpecFromProto(proto));
  if (!graph.ok()) std::abort();
  return *std::move(graph);
}

// Actions per rank of the schedule `simulate --plan` draws for `plan`.
std::vector<int> ActionsPerRank(const v1::Plan& plan) {
  absl::StatusOr<Scenario> sc = ScenarioFromPlan(plan);
  EXPECT_TRUE(sc.ok()) << sc.status();
  absl::StatusOr<SimulatedScenario> run = SimulateScenario(*sc, false);
  EXPECT_TRUE(run.ok()) << run.status();
  std::vector<int> out;
  for (const auto& program : run->lowered.programs) {
    int n = 0;
    for (const auto& a : program) n += a.has_value();
    out.push_back(n);
  }
  return out;
}

// Lanes of every panel and action boxes of every lane.
std::vector<std::vector<int>> BoxesPerLane(const XmlElement& svg) {
  std::vector<std::vector<int>> out;
  for (const XmlElement* panel : WithClass(svg, "panel")) {
    out.emplace_back();
    for (const XmlElement* lane : WithClass(*panel, "lane")) {
      out.back().push_back(static_cast<int>(WithClass(*lane, "action").size()));
    }
  }
  return out;
}

TEST(SvgWriterTest, EscapesTextAndAttributes) {
  const std::string nasty = "a<b & \"c\" 'd'>";
  SvgWriter svg(100, 50);
  svg.Rect(1, 2, 3, 4, "#000", {{"class", nasty}}, nasty);
  svg.Text(5, 6, nasty);
  const std::string text = std::move(svg).Finish();
  EXPECT_FALSE(absl::StrContains(text, nasty));
  EXPECT_TRUE(absl::StrContains(text, "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"));
  XmlElement root = ParseSvg(text);
  EXPECT_EQ(root.Attr("width"), "100");
  auto texts = root.FindAll([](const XmlElement& e) { return e.name == "text"; });
  ASSERT_EQ(texts.size(), 1u);
  EXPECT_EQ(texts[0]->text, nasty);
  auto boxes = WithClass(root, "a<b");  // the class attribute, decoded and split
  ASSERT_EQ(boxes.size(), 1u);
  EXPECT_EQ(boxes[0]->Attr("class"), nasty);
  ASSERT_EQ(boxes[0]->children.size(), 1u);
  EXPECT_EQ(boxes[0]->children[0].text, nasty);  // the tooltip
}

TEST(SvgWriterTest, NumbersHaveAtMostTwoDecimals) {
  EXPECT_EQ(SvgNumber(1.0), "1");
  EXPECT_EQ(SvgNumber(2.345), "2.35");
  EXPECT_EQ(SvgNumber(-0.001), "0");
  EXPECT_EQ(SvgNumber(0.5), "0.5");
}

TEST(SimulateSvgTest, OneLanePerRankOneBoxPerActionOfTheLoweredSchedule) {
  const v1::Plan plan = PlanOfGpt1k();
  TempDir dir;
  const std::string plan_path = dir.path() + "/plan.json";
  ASSERT_TRUE(WriteOutputFile(plan_path, ToJson(plan), "plan").ok());
  const std::string svg_path = dir.path() + "/timeline.svg";
  ASSERT_EQ(RunCli({"simulate", "--plan", plan_path, "--svg", svg_path}), 0);
  const XmlElement svg = ParseSvg(ReadFile(svg_path));
  const std::vector<int> expected = ActionsPerRank(plan);
  ASSERT_EQ(expected.size(), 4u);
  EXPECT_EQ(BoxesPerLane(svg), std::vector<std::vector<int>>{expected});
  EXPECT_EQ(WithClass(svg, "legend").size(), 1u);
  auto axis_texts =
      WithClass(svg, "axis")[0]->FindAll([](const XmlElement& e) { return e.name == "text"; });
  ASSERT_GE(axis_texts.size(), 3u);  // ticks and the unit
  EXPECT_TRUE(absl::StartsWith(axis_texts.back()->text, "time ("));
}

TEST(SimulateSvgTest, NamedScheduleWithUnitTimes) {
  TempDir dir;
  const std::string path = dir.path() + "/zbv.svg";
  ASSERT_EQ(RunCli({"simulate", "--schedule", "ZBVZeroBubble", "--ranks", "4", "--microbatches",
                    "8", "--svg", path, "-o", "json"}),
            0);
  const XmlElement svg = ParseSvg(ReadFile(path));
  const std::vector<std::vector<int>> lanes = BoxesPerLane(svg);
  ASSERT_EQ(lanes.size(), 1u);
  ASSERT_EQ(lanes[0].size(), 4u);
  // Every rank runs F, I and W of 8 microbatches on each of its 2 stages.
  for (int boxes : lanes[0]) EXPECT_GE(boxes, 2 * 8 * 3);
  EXPECT_EQ(WithClass(svg, "W").size(), 4u * 2 * 8);
}

TEST(SimulateSvgTest, MissingFolderIsNotFoundNamingThePath) {
  const std::string path = "/nonexistent-pipeplan-dir/timeline.svg";
  ::testing::internal::CaptureStderr();
  const int code = RunCli(
      {"simulate", "--schedule", "1F1B", "--ranks", "2", "--microbatches", "2", "--svg", path});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 4) << err;  // not found
  EXPECT_TRUE(absl::StrContains(err, path)) << err;
  EXPECT_EQ(WriteOutputFile(path, "x", "SVG").code(), absl::StatusCode::kNotFound);
  TempDir dir;
  EXPECT_EQ(WriteOutputFile(dir.path(), "x", "SVG").code(), absl::StatusCode::kFailedPrecondition);
}

// --trace, --save-csv and jobs trace --out share the writer: a missing
// folder is NOT_FOUND (exit 4), not PERMISSION_DENIED as it was.
TEST(SimulateSvgTest, TraceIntoAMissingFolderIsNotFound) {
  const std::string path = "/nonexistent-pipeplan-dir/trace.json";
  ::testing::internal::CaptureStderr();
  const int code = RunCli(
      {"simulate", "--schedule", "1F1B", "--ranks", "2", "--microbatches", "2", "--trace", path});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 4) << err;
  EXPECT_TRUE(absl::StrContains(err, "NOT_FOUND")) << err;
  EXPECT_TRUE(absl::StrContains(err, path)) << err;
}

TEST(PlanSvgTest, OneBandPerStageAndOneBarPerNode) {
  TempDir dir;
  const std::string path = dir.path() + "/plan.svg";
  const v1::Plan plan = PlanOfGpt1k({"--svg", path});
  const XmlElement svg = ParseSvg(ReadFile(path));
  ASSERT_EQ(plan.stages_size(), 4);
  EXPECT_EQ(WithClass(svg, "stage-band").size(), 4u);
  EXPECT_EQ(WithClass(svg, "stage-row").size(), 4u);
  EXPECT_EQ(static_cast<int>(WithClass(svg, "node").size()), plan.node_stage_size());
  EXPECT_EQ(WithClass(svg, "memory").size(), 4u);
  const auto rows = WithClass(svg, "stage-row");
  for (int s = 0; s < plan.stages_size(); ++s) {
    auto texts = rows[s]->FindAll([](const XmlElement& e) { return e.name == "text"; });
    bool names_device = false;
    for (const XmlElement* t : texts) names_device |= t->text == plan.stages(s).device_id();
    EXPECT_TRUE(names_device) << "stage " << s;
  }
}

TEST(PlanSvgTest, EscapesNamesFromTheGraphAndCluster) {
  v1::Plan plan = PlanOfGpt1k();
  plan.set_graph_name("gpt <1k> & \"friends\"");
  plan.mutable_stages(0)->set_device_id("gpu<0>&'x'");
  plan.mutable_stages(0)->set_first_node("<input>");
  absl::StatusOr<std::string> text = PlanSvg(Gpt1kGraph(), plan);
  ASSERT_TRUE(text.ok()) << text.status();
  const XmlElement svg = ParseSvg(*text);
  auto texts = svg.FindAll([](const XmlElement& e) { return e.name == "text"; });
  bool title = false, device = false, node = false;
  for (const XmlElement* t : texts) {
    title |= absl::StrContains(t->text, "gpt <1k> & \"friends\"");
    device |= t->text == "gpu<0>&'x'";
    node |= absl::StrContains(t->text, "<input>");
  }
  EXPECT_TRUE(title && device && node);
}

TEST(PlanSvgTest, RejectsAPlanOfAnotherGraph) {
  v1::Plan plan = PlanOfGpt1k();
  plan.mutable_node_stage()->RemoveLast();
  EXPECT_EQ(PlanSvg(Gpt1kGraph(), plan).status().code(), absl::StatusCode::kInvalidArgument);
}

// A measured step made from the plan's own simulated one, 10% slower and
// with rank r starting r ms late, as workers would report it.
std::vector<StepSample> MeasuredStep(const v1::Plan& plan) {
  absl::StatusOr<Scenario> sc = ScenarioFromPlan(plan);
  absl::StatusOr<SimulatedScenario> run = SimulateScenario(*sc, true);
  EXPECT_TRUE(run.ok());
  std::vector<StepSample> out(run->lowered.num_ranks);
  for (int r = 0; r < run->lowered.num_ranks; ++r) {
    out[r].rank = r;
    out[r].step = 42;
    out[r].start_unix_us = 1'700'000'000'000'000 + 1000 * r;
  }
  for (const schedule::TimelineEvent& e : run->sim.timeline) {
    out[e.rank].timings.push_back({schedule::ActionToString(e.action), 1.1 * (e.end - e.start),
                                   1.1 * e.start - 1e-3 * e.rank});
  }
  return out;
}

TEST(JobsTraceSvgTest, MeasuredAbovePredictedWithOneBoxPerReportedAction) {
  const v1::Plan plan = PlanOfGpt1k();
  const std::vector<StepSample> step = MeasuredStep(plan);
  absl::StatusOr<std::string> text = StepTraceSvg("job<7>", step, plan, 3);
  ASSERT_TRUE(text.ok()) << text.status();
  const XmlElement svg = ParseSvg(*text);
  std::vector<int> reported;
  for (const StepSample& s : step) reported.push_back(static_cast<int>(s.timings.size()));
  EXPECT_EQ(BoxesPerLane(svg), (std::vector<std::vector<int>>{reported, ActionsPerRank(plan)}));
  auto labels = svg.FindAll(
      [](const XmlElement& e) { return e.name == "text" && e.Attr("font-weight") == "bold"; });
  ASSERT_GE(labels.size(), 3u);  // title, then one label per panel
  EXPECT_TRUE(absl::StrContains(labels[0]->text, "job job<7>, step 42"));
  EXPECT_TRUE(absl::StartsWith(labels[1]->text, "measured: step 42"));
  EXPECT_TRUE(absl::StartsWith(labels[2]->text, "predicted by plan version 3"));
}

// With data-parallel replicas every replica's pipeline is a measured panel
// of its own (before, the reports of one rank folded into one lane).
TEST(JobsTraceSvgTest, OneMeasuredPanelPerReplica) {
  const v1::Plan plan = PlanOfGpt1k();
  std::vector<StepSample> step = MeasuredStep(plan);
  std::vector<StepSample> second = step;
  for (StepSample& s : second) {
    s.replica = 1;
    s.timings.pop_back();  // replica 1 reports one action less on every rank
  }
  step.insert(step.end(), second.begin(), second.end());
  absl::StatusOr<std::string> text = StepTraceSvg("7", step, plan, 2);
  ASSERT_TRUE(text.ok()) << text.status();
  const XmlElement svg = ParseSvg(*text);
  std::vector<int> replica0, replica1;
  for (const StepSample& s : step) {
    (s.replica == 0 ? replica0 : replica1).push_back(static_cast<int>(s.timings.size()));
  }
  EXPECT_EQ(BoxesPerLane(svg),
            (std::vector<std::vector<int>>{replica0, replica1, ActionsPerRank(plan)}));
  auto labels = svg.FindAll(
      [](const XmlElement& e) { return e.name == "text" && e.Attr("font-weight") == "bold"; });
  ASSERT_GE(labels.size(), 4u);
  EXPECT_TRUE(absl::StrContains(labels[1]->text, "replica 0"));
  EXPECT_TRUE(absl::StrContains(labels[2]->text, "replica 1"));
}

// rsvg-convert on PATH, or "".
std::string Rsvg() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "", ':')) {
    const std::string exe = std::string(dir) + "/rsvg-convert";
    if (!dir.empty() && access(exe.c_str(), X_OK) == 0) return exe;
  }
  return "";
}

// Width and height from a PNG's IHDR chunk; {0, 0} when it is no PNG.
std::pair<int, int> PngSize(const std::string& png) {
  if (png.size() < 24 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return {0, 0};
  auto be32 = [&](size_t at) {
    int v = 0;
    for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(png[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

TEST(SvgRenderTest, RsvgConvertRendersEveryPictureAtItsSize) {
  const std::string rsvg = Rsvg();
  if (rsvg.empty()) GTEST_SKIP() << "rsvg-convert is not on PATH (Debian: librsvg2-bin)";
  TempDir dir;
  const std::string d = dir.path();
  ASSERT_EQ(RunCli({"simulate", "--schedule", "1F1B", "--ranks", "4", "--microbatches", "8",
                    "--svg", d + "/simulate.svg", "-o", "json"}),
            0);
  const v1::Plan plan = PlanOfGpt1k({"--svg", d + "/plan.svg"});
  absl::StatusOr<std::string> trace = StepTraceSvg("7", MeasuredStep(plan), plan, 1);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_TRUE(WriteOutputFile(d + "/trace.svg", *trace, "SVG").ok());
  for (const std::string name : {"simulate", "plan", "trace"}) {
    const std::string svg = d + "/" + name + ".svg", png = d + "/" + name + ".png";
    const std::string cmd = rsvg + " -o '" + png + "' '" + svg + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const XmlElement root = ParseSvg(ReadFile(svg));
    const std::string bytes = ReadFile(png);
    EXPECT_GT(bytes.size(), 1000u) << name;
    EXPECT_EQ(PngSize(bytes),
              std::pair(std::stoi(root.Attr("width")), std::stoi(root.Attr("height"))))
        << name;
  }
}

}  // namespace
}  // namespace pipeplan::cli
