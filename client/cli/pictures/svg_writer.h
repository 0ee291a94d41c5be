// The one SVG writer of the CLI's pictures (`simulate --svg`, `jobs trace
// --svg`, `plan --svg`): builds an SVG 1.1 document element by element, with
// every attribute value and text escaped (XmlEscape), so a node id or device
// name such as `a<b & "c"` cannot break the file. Coordinates are user units
// (pixels at 96 dpi); numbers are written with at most two decimals.
//
// Usage:
//   SvgWriter svg(800, 600);
//   svg.Rect(10, 10, 50, 20, "#4c78a8", {{"class", "action"}}, "F s0 mb3");
//   svg.Text(12, 24, "3", {{"fill", "#fff"}});
//   std::string file = std::move(svg).Finish();
//
// Not thread-safe; no I/O (WriteOutputFile in output_file.h writes the result).
#ifndef PIPEPLAN_CLIENT_CLI_SVG_WRITER_H_
#define PIPEPLAN_CLIENT_CLI_SVG_WRITER_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace pipeplan::cli {

// `text` with &, <, >, " and ' replaced by their entities; safe in element
// text and in attribute values.
std::string XmlEscape(absl::string_view text);

// A number as an attribute value: at most two decimals, no trailing zeros.
std::string SvgNumber(double value);

// One attribute; the value is escaped when written.
struct SvgAttr {
  SvgAttr(absl::string_view n, absl::string_view v) : name(n), value(v) {}
  SvgAttr(absl::string_view n, const char* v) : name(n), value(v) {}
  SvgAttr(absl::string_view n, double v) : name(n), value(SvgNumber(v)) {}
  SvgAttr(absl::string_view n, int v) : name(n), value(std::to_string(v)) {}
  absl::string_view name;
  std::string value;
};
using SvgAttrs = std::initializer_list<SvgAttr>;

class SvgWriter {
 public:
  // The document's size in user units; a white background fills it.
  SvgWriter(double width, double height);

  // <g attrs> ... </g>: every Open needs a Close (Finish closes what is left).
  void Open(absl::string_view element, SvgAttrs attrs = {});
  void Close();

  // A rectangle; a non-empty `tooltip` becomes its <title> (shown on hover).
  void Rect(double x, double y, double w, double h, absl::string_view fill, SvgAttrs attrs = {},
            absl::string_view tooltip = "");
  void Line(double x1, double y1, double x2, double y2, absl::string_view stroke,
            SvgAttrs attrs = {});
  // Text at (x, y) (the baseline); 12 px sans-serif unless attrs say otherwise.
  void Text(double x, double y, absl::string_view text, SvgAttrs attrs = {});

  // The document; the writer is spent.
  std::string Finish() &&;

 private:
  // "<element fixed attrs" without the closing ">" or "/>".
  void StartTag(absl::string_view element, SvgAttrs fixed, SvgAttrs attrs);

  std::string out_;
  std::vector<std::string> open_;
};

}  // namespace pipeplan::cli

#endif  // PIPEPLAN_CLIENT_CLI_SVG_WRITER_H_
