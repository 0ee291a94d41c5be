#include "plan_svg.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeplan/convert/plan_decoder.h"
#include "plan_table.h"
#include "svg_writer.h"

namespace pipeplan::cli {
namespace {

constexpr double kWidth = 1290;
constexpr double kLeft = 36;  // the node strip's left edge
constexpr double kRight = 20;
constexpr double kStripTop = 78;
constexpr double kStrip = 90;                         // node strip height
constexpr double kRowsTop = kStripTop + kStrip + 58;  // first stage row's top
constexpr double kRow = 24;
constexpr double kTimeX = 640, kTimeW = 240;  // time bar column
constexpr double kMemX = 980, kMemW = 150;    // memory bar column
constexpr const char* kForward = "#4c78a8";
constexpr const char* kBackward = "#f58518";
constexpr const char* kComm = "#2a9d8f";

const char* StageColor(int stage) {
  static constexpr const char* kPalette[] = {"#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2",
                                             "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac"};
  return kPalette[stage % 10];
}

// `text` cut to `max` bytes (at a UTF-8 character boundary) with "…".
std::string Shorten(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t n = max - 1;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n) + "\u2026";
}

// What the node strip shows of the model: the order of nodes along x and where each stage's run
// of nodes begins.
struct Layout {
  std::vector<int> order;        // node indices, left to right
  std::vector<int> stage_begin;  // per stage + 1: position of its first node
  double x0 = kLeft;
  double width = kWidth - kLeft - kRight;
  double X(double position) const {
    return x0 + width * position / std::max<double>(1, static_cast<double>(order.size()));
  }
};

Layout LayOut(const Graph& graph, const v1::Plan& plan) {
  Layout out;
  out.order.resize(graph.num_nodes());
  std::iota(out.order.begin(), out.order.end(), 0);
  std::stable_sort(out.order.begin(), out.order.end(), [&](int a, int b) {
    return std::pair(plan.node_stage(a), graph.topo_position(a)) <
           std::pair(plan.node_stage(b), graph.topo_position(b));
  });
  out.stage_begin.assign(plan.stages_size() + 1, 0);
  for (int v = 0; v < graph.num_nodes(); ++v) ++out.stage_begin[plan.node_stage(v) + 1];
  std::partial_sum(out.stage_begin.begin(), out.stage_begin.end(), out.stage_begin.begin());
  return out;
}

// Forward seconds when measured, else forward FLOPs: only the shape matters.
double NodeWeight(const Graph& graph, int v) {
  const NodeSpec& n = graph.node(v);
  return n.forward_seconds ? *n.forward_seconds : n.forward_flops;
}

void DrawStripNodes(SvgWriter& svg, const Graph& graph, const v1::Plan& plan, const Layout& l) {
  double max_weight = 0;
  for (int v = 0; v < graph.num_nodes(); ++v) {
    max_weight = std::max(max_weight, NodeWeight(graph, v));
  }
  const double w = std::max(l.X(1) - l.X(0), 0.2);
  const double gap = w > 3 ? 1 : 0;
  for (size_t i = 0; i < l.order.size(); ++i) {
    const int v = l.order[i];
    // Square root: one large node (an LM head) must not flatten every other.
    const double share = max_weight > 0 ? std::sqrt(NodeWeight(graph, v) / max_weight) : 0;
    const double h = 2 + (kStrip - 18) * share;
    const NodeSpec& n = graph.node(v);
    svg.Rect(l.X(static_cast<double>(i)), kStripTop + kStrip - h, w - gap, h,
             StageColor(plan.node_stage(v)), {{"class", "node"}},
             absl::StrCat(n.id, " (", n.op, "), stage ", plan.node_stage(v)));
  }
}

void DrawStrip(SvgWriter& svg, const Graph& graph, const v1::Plan& plan, const Layout& l) {
  svg.Open("g", {{"class", "strip"}});
  for (int s = 0; s < plan.stages_size(); ++s) {
    const double x = l.X(l.stage_begin[s]);
    const double w = l.X(l.stage_begin[s + 1]) - x;
    svg.Rect(x, kStripTop, w, kStrip, StageColor(s),
             {{"class", "stage-band"}, {"fill-opacity", 0.16}},
             absl::StrCat("stage ", s, ": ", l.stage_begin[s + 1] - l.stage_begin[s], " nodes"));
    const std::string label = absl::StrCat("s", s);
    if (w >= label.size() * 8.0 + 6) {
      svg.Text(x + w / 2, kStripTop + 14, label,
               {{"text-anchor", "middle"}, {"font-weight", "bold"}, {"fill", "#333"}});
    }
  }
  DrawStripNodes(svg, graph, plan, l);
  for (int s = 1; s < plan.stages_size(); ++s) {
    const double x = l.X(l.stage_begin[s]);
    svg.Line(x, kStripTop - 4, x, kStripTop + kStrip + 4, "#222", {{"stroke-width", 1.5}});
  }
  const double y = kStripTop + kStrip + 16;
  svg.Text(l.x0, y, "node 0", {{"font-size", 11}, {"fill", "#555"}});
  svg.Text(l.x0 + l.width, y, absl::StrCat("node ", l.order.size() - 1),
           {{"font-size", 11}, {"fill", "#555"}, {"text-anchor", "end"}});
  svg.Text(
      l.x0 + l.width / 2, y,
      "the model's nodes in topological order; taller bars: more forward time; a line at each cut",
      {{"font-size", 11}, {"fill", "#555"}, {"text-anchor", "middle"}});
  svg.Close();
}

// Largest stage time and memory, to scale the bars of every row alike.
struct Scales {
  double seconds = 0;
  double bytes = 0;
};

Scales ScalesOf(const v1::Plan& plan) {
  Scales s;
  for (const v1::Stage& st : plan.stages()) {
    s.seconds =
        std::max(s.seconds, st.forward_seconds() + st.backward_seconds() + st.comm_seconds());
    s.bytes = std::max({s.bytes, st.peak_memory_bytes(), st.memory_capacity_bytes()});
  }
  return s;
}

void DrawTimeBar(SvgWriter& svg, const v1::Stage& st, const Scales& scales, double y,
                 bool bottleneck) {
  double x = kTimeX;
  const double total = st.forward_seconds() + st.backward_seconds() + st.comm_seconds();
  for (auto [seconds, color, name] : {std::tuple(st.forward_seconds(), kForward, "forward"),
                                      std::tuple(st.backward_seconds(), kBackward, "backward"),
                                      std::tuple(st.comm_seconds(), kComm, "communication")}) {
    const double w = scales.seconds > 0 ? kTimeW * seconds / scales.seconds : 0;
    svg.Rect(x, y, w, 12, color, {{"class", "time"}},
             absl::StrCat(name, ": ", HumanSeconds(seconds)));
    x += w;
  }
  svg.Text(x + 6, y + 11, HumanSeconds(total),
           {{"fill", "#333"}, {"font-weight", bottleneck ? "bold" : "normal"}});
}

void DrawMemoryBar(SvgWriter& svg, const v1::Stage& st, int stage, const Scales& scales, double y) {
  const double scale = scales.bytes > 0 ? kMemW / scales.bytes : 0;
  const double capacity = st.memory_capacity_bytes();
  if (capacity > 0) {
    svg.Rect(kMemX, y, capacity * scale, 12, "#f4f4f4",
             {{"class", "capacity"}, {"stroke", "#999"}, {"stroke-width", 0.8}});
  }
  const bool over = capacity > 0 && st.peak_memory_bytes() > capacity;
  svg.Rect(kMemX, y, st.peak_memory_bytes() * scale, 12, over ? "#d62728" : StageColor(stage),
           {{"class", "memory"}});
  svg.Text(kMemX + kMemW + 8, y + 11,
           capacity > 0
               ? absl::StrCat(HumanBytes(st.peak_memory_bytes()), " / ", HumanBytes(capacity))
               : HumanBytes(st.peak_memory_bytes()),
           {{"fill", "#333"}});
}

void DrawRowsHeader(SvgWriter& svg) {
  const double y = kRowsTop - 12;
  const SvgAttrs bold = {{"font-weight", "bold"}, {"fill", "#333"}};
  svg.Open("g", {{"class", "header"}});
  svg.Text(16, y, "stage · rank", bold);
  svg.Text(140, y, "device", bold);
  svg.Text(290, y, "nodes (first .. last)", bold);
  svg.Text(kTimeX, y, "time per microbatch", bold);
  double x = kTimeX + 150;
  for (auto [color, name] :
       {std::pair(kForward, "F"), std::pair(kBackward, "B"), std::pair(kComm, "comm")}) {
    svg.Rect(x, y - 10, 10, 10, color);
    svg.Text(x + 13, y, name, {{"fill", "#333"}, {"font-size", 11}});
    x += 13 + 8 * absl::string_view(name).size() + 8;
  }
  svg.Text(kMemX, y, "peak memory / capacity", bold);
  svg.Close();
}

void DrawStageRow(SvgWriter& svg, const v1::Plan& plan, int s, const Scales& scales, double y,
                  bool bottleneck) {
  const v1::Stage& st = plan.stages(s);
  const int rank = RankOfDevice(plan, st.device_id());
  svg.Open("g", {{"class", "stage-row"}});
  if (s % 2 == 1) svg.Rect(10, y - 3, kWidth - 20, kRow, "#f7f7f7");
  svg.Rect(16, y, 12, 12, StageColor(s), {{"class", "swatch"}});
  svg.Text(34, y + 11, absl::StrCat("s", s, " · rank ", rank), {{"fill", "#333"}});
  svg.Text(140, y + 11, Shorten(st.device_id(), 20), {{"fill", "#333"}});
  svg.Text(290, y + 11,
           absl::StrCat(st.num_nodes(), ": ", Shorten(st.first_node(), 20), " .. ",
                        Shorten(st.last_node(), 20)),
           {{"fill", "#333"}});
  DrawTimeBar(svg, st, scales, y, bottleneck);
  DrawMemoryBar(svg, st, s, scales, y);
  svg.Close();
}

std::string Title(const v1::Plan& plan) {
  std::string title = absl::StrFormat("plan of %s: %d stages on %d ranks", plan.graph_name(),
                                      plan.stages_size(), PlanRanks(plan));
  if (plan.replicas_size() > 1) absl::StrAppend(&title, " × ", plan.replicas_size(), " replicas");
  absl::StrAppend(&title, ", ", ScheduleDisplayName(plan.schedule()), ", ", plan.microbatches(),
                  " microbatches");
  return title;
}

absl::Status CheckPlan(const Graph& graph, const v1::Plan& plan) {
  if (plan.stages_size() == 0) return absl::InvalidArgumentError("plan.stages: the plan has none");
  if (plan.node_stage_size() != graph.num_nodes()) {
    return absl::InvalidArgumentError(absl::StrCat("plan.node_stage: ", plan.node_stage_size(),
                                                   " entries for a graph of ", graph.num_nodes(),
                                                   " nodes"));
  }
  for (int v = 0; v < graph.num_nodes(); ++v) {
    if (plan.node_stage(v) < 0 || plan.node_stage(v) >= plan.stages_size()) {
      return absl::InvalidArgumentError(absl::StrCat("plan.node_stage[", v, "]: stage ",
                                                     plan.node_stage(v), " is not in the plan"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> PlanSvg(const Graph& graph, const v1::Plan& plan) {
  if (absl::Status s = CheckPlan(graph, plan); !s.ok()) return s;
  const Layout layout = LayOut(graph, plan);
  const Scales scales = ScalesOf(plan);
  SvgWriter svg(kWidth, kRowsTop + plan.stages_size() * kRow + 16);
  svg.Text(16, 26, Title(plan), {{"font-weight", "bold"}, {"font-size", 16}});
  svg.Text(16, 48,
           absl::StrFormat("predicted step %s, bubble %.1f%%, bottleneck stage %s per microbatch",
                           HumanSeconds(plan.step_seconds()), 100 * plan.bubble_ratio(),
                           HumanSeconds(plan.bottleneck_seconds())),
           {{"fill", "#555"}});
  DrawStrip(svg, graph, plan, layout);
  DrawRowsHeader(svg);
  const auto slowest = std::max_element(
      plan.stages().begin(), plan.stages().end(),
      [](const v1::Stage& a, const v1::Stage& b) { return a.stage_seconds() < b.stage_seconds(); });
  for (int s = 0; s < plan.stages_size(); ++s) {
    DrawStageRow(svg, plan, s, scales, kRowsTop + s * kRow, s == slowest - plan.stages().begin());
  }
  return std::move(svg).Finish();
}

}  // namespace pipeplan::cli
