// Timelines as Chrome trace JSON (the format chrome://tracing and Perfetto
// open), and as a terminal Gantt picture.
//
// FormatChromeTrace: one process per rank ("rank 0", ...; with measured
// spans of several data-parallel replicas one per (replica, rank), "replica
// 1 rank 0", replica-major) with two threads,
// "compute" and "comm"; every span is a complete event ("ph": "X") named
// like "F s3 mb5" with category = the action type, times in microseconds.
// `simulate --trace` (predicted) and `jobs trace` (measured) both write it,
// so the two files compare side by side.
//
// FormatGantt: one row per rank (per (replica, rank), "q1 rank 0", with
// several replicas), `width` columns spanning the step; a
// column shows the compute action type running there (F, I, W, B, or O for
// an overlapped F+B) and '.' when the rank computes nothing.
//
// Pure functions returning strings; no I/O.
#ifndef PIPEPLAN_CORE_CHROME_TRACE_H_
#define PIPEPLAN_CORE_CHROME_TRACE_H_

#include <span>
#include <string>
#include <string_view>

#include "pipeplan/core/timeline.h"

namespace pipeplan {

// `title` names the trace (metadata "pipeplan_title"); `num_ranks` ranks get
// their tracks even when they have no span.
std::string FormatChromeTrace(std::span<const TraceSpan> spans, int num_ranks,
                              std::string_view title);

// REQUIRES: width >= 10.
std::string FormatGantt(std::span<const TraceSpan> spans, int num_ranks, int width);

}  // namespace pipeplan

#endif  // PIPEPLAN_CORE_CHROME_TRACE_H_
