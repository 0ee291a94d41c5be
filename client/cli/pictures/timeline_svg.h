// A pipeline step as a picture: the per-rank timeline that `pipeplan simulate
// --svg` (predicted) and `pipeplan jobs trace --svg` (measured above the
// predicted step of the same plan) write.
//
// Each panel has one lane per rank with time on x: a box per compute action
// coloured by kind (forward, backward-input, backward-weight, full backward,
// overlapped F+B) with its microbatch number inside when the box is wide
// enough, a thin strip under it for SEND/RECV (posted to completed), and the
// grey lane showing through where the rank is idle. A legend of the kinds in
// the picture, and under every panel a time axis in seconds (s, ms or us);
// all panels share one time scale so they compare by eye. Every box's
// <title> names the action and its times (shown on hover).
//
// Elements a reader (or a test) can count: <g class="panel">, one per panel;
// in it <g class="lane">, one per rank in rank order; in a lane one
// <rect class="action ..."> per span. Pure functions; no I/O.
#ifndef PIPEPLAN_CLIENT_CLI_TIMELINE_SVG_H_
#define PIPEPLAN_CLIENT_CLI_TIMELINE_SVG_H_

#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "pipeplan/core/timeline.h"

namespace pipeplan::cli {

// One step to draw: spans (timeline.h) with times in seconds from the step's
// start, over ranks 0..num_ranks-1 (a rank without spans gets an empty lane;
// spans of other ranks are ignored).
struct TimelinePanel {
  std::string label;  // "predicted: 1F1B", "measured: job 7 step 12"
  std::vector<TraceSpan> spans;
  int num_ranks = 0;
};

// The panels one under another, under `title`.
std::string TimelineSvg(absl::string_view title, std::span<const TimelinePanel> panels);

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_TIMELINE_SVG_H_
