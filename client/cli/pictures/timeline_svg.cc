#include "timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "svg_writer.h"

namespace pipeplan::cli {
namespace {

using schedule::ActionType;

constexpr double kWidth = 1200;
constexpr double kLeft = 80;    // rank labels
constexpr double kRight = 90;   // busy share per rank
constexpr double kLane = 34;    // one rank: compute box, comm strip, gap
constexpr double kBox = 20;     // compute box height
constexpr double kComm = 4;     // height of the send strip, and of the recv strip under it
constexpr double kAxis = 34;    // tick labels and the unit under a panel
constexpr double kLabel = 22;   // panel label above its lanes
constexpr double kGap = 14;     // between panels
constexpr double kHeader = 62;  // title and legend
constexpr const char* kIdle = "#ececec";

struct KindStyle {
  const char* color;
  const char* name;  // in the legend
  const char* css;   // class token
};

KindStyle StyleOf(ActionType type) {
  switch (type) {
    case ActionType::kForward:
      return {"#4c78a8", "forward (F)", "F"};
    case ActionType::kBackwardInput:
      return {"#e45756", "backward, input (I)", "I"};
    case ActionType::kBackwardWeight:
      return {"#54a24b", "backward, weight (W)", "W"};
    case ActionType::kFullBackward:
      return {"#f58518", "backward (B)", "B"};
    case ActionType::kOverlapFB:
      return {"#b279a2", "forward + backward (F+B)", "FB"};
    case ActionType::kSendF:
    case ActionType::kSendB:
      return {"#2a9d8f", "send", "SEND"};
    case ActionType::kRecvF:
    case ActionType::kRecvB:
      return {"#9d755d", "recv", "RECV"};
  }
  return {"#888888", "other", "other"};
}

// Roughly how wide `text` is at `font_size` px in a sans-serif font.
double TextWidth(absl::string_view text, double font_size = 12) {
  return static_cast<double>(text.size()) * font_size * 0.6;
}

// Time on x: seconds to user units, and round ticks in a readable unit.
struct TimeAxis {
  double end = 1;  // seconds at the right edge
  double x0 = kLeft;
  double width = kWidth - kLeft - kRight;

  double X(double seconds) const { return x0 + width * seconds / end; }
  double Step() const {
    const double raw = end / 8;
    const double mag = std::pow(10, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * mag >= raw) return m * mag;
    }
    return 10 * mag;
  }
  // Unit name and seconds per unit.
  std::pair<const char*, double> Unit() const {
    if (end >= 1) return {"s", 1};
    if (end >= 1e-3) return {"ms", 1e-3};
    return {"us", 1e-6};
  }
};

void DrawLegend(SvgWriter& svg, std::span<const TimelinePanel> panels, double y) {
  std::set<absl::string_view> present;
  for (const TimelinePanel& p : panels) {
    for (const TraceSpan& s : p.spans) present.insert(StyleOf(s.action.type).css);
  }
  std::vector<KindStyle> kinds;
  for (ActionType t : {ActionType::kForward, ActionType::kBackwardInput,
                       ActionType::kBackwardWeight, ActionType::kFullBackward,
                       ActionType::kOverlapFB, ActionType::kSendF, ActionType::kRecvF}) {
    if (present.contains(StyleOf(t).css)) kinds.push_back(StyleOf(t));
  }
  kinds.push_back({kIdle, "idle", "idle"});
  svg.Open("g", {{"class", "legend"}});
  double x = kLeft;
  for (const KindStyle& k : kinds) {
    svg.Rect(x, y - 10, 12, 12, k.color, {{"stroke", "#999"}, {"stroke-width", 0.5}});
    svg.Text(x + 17, y, k.name, {{"fill", "#333"}});
    x += 17 + TextWidth(k.name, 11) + 16;
  }
  svg.Close();
}

std::string MicrobatchText(const schedule::Action& a) {
  if (a.type == ActionType::kOverlapFB) {
    return absl::StrCat(a.microbatch, "/", a.backward_microbatch);
  }
  return absl::StrCat(a.microbatch);
}

void DrawSpan(SvgWriter& svg, const TimeAxis& axis, const TraceSpan& s, double y) {
  const KindStyle k = StyleOf(s.action.type);
  const double x = axis.X(s.start);
  const double w = std::max(axis.X(s.end) - x, 0.5);
  const std::string tip =
      absl::StrFormat("rank %d: %s, %.6g .. %.6g s", s.rank, SpanName(s.action), s.start, s.end);
  const std::string css = absl::StrCat("action ", k.css);
  if (schedule::IsCommunication(s.action.type)) {
    const bool recv = s.action.type == ActionType::kRecvF || s.action.type == ActionType::kRecvB;
    // A send lasts no time in the simulator: at least a visible tick.
    svg.Rect(x, y + kBox + 1 + (recv ? kComm : 0), std::max(w, 2.0), kComm, k.color,
             {{"class", css}, {"opacity", 0.8}}, tip);
    return;
  }
  svg.Rect(x, y, w, kBox, k.color, {{"class", css}, {"stroke", "#fff"}, {"stroke-width", 0.5}},
           tip);
  const std::string mb = MicrobatchText(s.action);
  if (w >= TextWidth(mb, 11) + 4) {
    svg.Text(x + w / 2, y + kBox / 2 + 4, mb,
             {{"fill", "#fff"}, {"font-size", 11}, {"text-anchor", "middle"}});
  }
}

// `step`: the panel's own length, which the busy share is of.
void DrawLane(SvgWriter& svg, const TimeAxis& axis, const TimelinePanel& p, int rank, double y,
              double step) {
  svg.Open("g", {{"class", "lane"}});
  svg.Text(kLeft - 10, y + kBox / 2 + 4, absl::StrCat("rank ", rank),
           {{"text-anchor", "end"}, {"fill", "#333"}});
  double busy = 0;
  for (const TraceSpan& s : p.spans) {
    if (s.rank != rank) continue;
    DrawSpan(svg, axis, s, y);
    if (schedule::IsCompute(s.action.type)) busy += s.end - s.start;
  }
  svg.Text(axis.x0 + axis.width + 10, y + kBox / 2 + 4,
           absl::StrFormat("busy %.0f%%", step > 0 ? 100 * busy / step : 0), {{"fill", "#555"}});
  svg.Close();
}

// Idle lanes first, then the grid, so boxes cover both.
void DrawBackground(SvgWriter& svg, const TimeAxis& axis, int ranks, double top) {
  for (int r = 0; r < ranks; ++r) {
    svg.Rect(axis.x0, top + r * kLane, axis.width, kBox + 2 * kComm + 1, kIdle,
             {{"class", "idle"}});
  }
  const double bottom = top + ranks * kLane;
  for (int i = 0; i * axis.Step() <= axis.end * (1 + 1e-9); ++i) {
    const double x = axis.X(i * axis.Step());
    svg.Line(x, top, x, bottom, "#b0b0b0", {{"stroke-width", 0.6}, {"stroke-dasharray", "2,3"}});
  }
}

void DrawAxis(SvgWriter& svg, const TimeAxis& axis, double y) {
  const auto [unit, per_unit] = axis.Unit();
  const double step = axis.Step();
  svg.Open("g", {{"class", "axis"}});
  svg.Line(axis.x0, y, axis.x0 + axis.width, y, "#333");
  for (int i = 0; i * step <= axis.end * (1 + 1e-9); ++i) {
    const double x = axis.X(i * step);
    svg.Line(x, y, x, y + 4, "#333");
    svg.Text(x, y + 16, absl::StrFormat("%g", i * step / per_unit),
             {{"text-anchor", "middle"}, {"fill", "#333"}, {"font-size", 11}});
  }
  svg.Text(kLeft - 10, y + 16, absl::StrCat("time (", unit, ")"),
           {{"text-anchor", "end"}, {"fill", "#333"}, {"font-size", 11}});
  svg.Close();
}

double PanelHeight(const TimelinePanel& p) { return kLabel + p.num_ranks * kLane + kAxis; }

void DrawPanel(SvgWriter& svg, const TimeAxis& axis, const TimelinePanel& p, double y) {
  svg.Open("g", {{"class", "panel"}});
  svg.Text(kLeft, y + 15, p.label, {{"font-weight", "bold"}, {"font-size", 13}});
  const double lanes = y + kLabel;
  DrawBackground(svg, axis, p.num_ranks, lanes);
  double step = 0;
  for (const TraceSpan& s : p.spans) step = std::max(step, s.end);
  for (int r = 0; r < p.num_ranks; ++r) DrawLane(svg, axis, p, r, lanes + r * kLane, step);
  DrawAxis(svg, axis, lanes + p.num_ranks * kLane - 4);
  svg.Close();
}

}  // namespace

std::string TimelineSvg(absl::string_view title, std::span<const TimelinePanel> panels) {
  TimeAxis axis;
  double end = 0;
  double height = kHeader;
  for (const TimelinePanel& p : panels) {
    for (const TraceSpan& s : p.spans) end = std::max(end, s.end);
    height += PanelHeight(p) + kGap;
  }
  if (end > 0) axis.end = end;
  SvgWriter svg(kWidth, height);
  svg.Text(kLeft, 24, title, {{"font-weight", "bold"}, {"font-size", 16}});
  DrawLegend(svg, panels, 48);
  double y = kHeader;
  for (const TimelinePanel& p : panels) {
    DrawPanel(svg, axis, p, y);
    y += PanelHeight(p) + kGap;
  }
  return std::move(svg).Finish();
}

}  // namespace pipeplan::cli
