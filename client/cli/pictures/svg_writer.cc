#include "svg_writer.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pipeplan::cli {

std::string XmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 allows no control characters but tab, newline and return.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string SvgNumber(double value) {
  if (!std::isfinite(value)) return "0";
  std::string s = absl::StrFormat("%.2f", value);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

SvgWriter::SvgWriter(double width, double height) {
  absl::StrAppend(&out_, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"",
                  SvgNumber(width), "\" height=\"", SvgNumber(height), "\" viewBox=\"0 0 ",
                  SvgNumber(width), " ", SvgNumber(height),
                  "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
                  "font-size=\"12\">\n");
  Rect(0, 0, width, height, "#ffffff", {{"class", "background"}});
}

void SvgWriter::StartTag(absl::string_view element, SvgAttrs fixed, SvgAttrs attrs) {
  absl::StrAppend(&out_, std::string(2 * (open_.size() + 1), ' '), "<", element);
  for (SvgAttrs list : {fixed, attrs}) {
    for (const SvgAttr& a : list) {
      absl::StrAppend(&out_, " ", a.name, "=\"", XmlEscape(a.value), "\"");
    }
  }
}

void SvgWriter::Open(absl::string_view element, SvgAttrs attrs) {
  StartTag(element, {}, attrs);
  out_ += ">\n";
  open_.emplace_back(element);
}

void SvgWriter::Close() {
  if (open_.empty()) return;
  absl::StrAppend(&out_, std::string(2 * open_.size(), ' '), "</", open_.back(), ">\n");
  open_.pop_back();
}

void SvgWriter::Rect(double x, double y, double w, double h, absl::string_view fill, SvgAttrs attrs,
                     absl::string_view tooltip) {
  StartTag("rect", {{"x", x}, {"y", y}, {"width", w}, {"height", h}, {"fill", fill}}, attrs);
  if (tooltip.empty()) {
    out_ += "/>\n";
    return;
  }
  absl::StrAppend(&out_, "><title>", XmlEscape(tooltip), "</title></rect>\n");
}

void SvgWriter::Line(double x1, double y1, double x2, double y2, absl::string_view stroke,
                     SvgAttrs attrs) {
  StartTag("line", {{"x1", x1}, {"y1", y1}, {"x2", x2}, {"y2", y2}, {"stroke", stroke}}, attrs);
  out_ += "/>\n";
}

void SvgWriter::Text(double x, double y, absl::string_view text, SvgAttrs attrs) {
  StartTag("text", {{"x", x}, {"y", y}}, attrs);
  absl::StrAppend(&out_, ">", XmlEscape(text), "</text>\n");
}

std::string SvgWriter::Finish() && {
  while (!open_.empty()) Close();
  out_ += "</svg>\n";
  return std::move(out_);
}

}  // namespace pipeplan::cli
