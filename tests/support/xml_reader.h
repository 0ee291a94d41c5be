// A strict little XML reader for tests that check a file pipeplan writes
// (the --svg pictures) is well-formed: one root element, every tag closed in
// order, attribute values quoted, no raw '<' or '&' outside markup, only the
// five predefined entities and character references. It reads the document
// into a tree with entities decoded, so a test can count elements and compare
// text with what went in. No DTDs, CDATA or namespaces beyond plain names.
#ifndef PIPEPLAN_TESTS_SUPPORT_XML_READER_H_
#define PIPEPLAN_TESTS_SUPPORT_XML_READER_H_

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace pipeplan::testing {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // the element's own character data, decoded
  std::vector<XmlElement> children;

  std::string Attr(const std::string& key) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? "" : it->second;
  }
  // Every descendant (not this element) for which `pred` holds, in document order.
  std::vector<const XmlElement*> FindAll(const std::function<bool(const XmlElement&)>& pred) const {
    std::vector<const XmlElement*> out;
    for (const XmlElement& c : children) {
      if (pred(c)) out.push_back(&c);
      for (const XmlElement* d : c.FindAll(pred)) out.push_back(d);
    }
    return out;
  }
};

class XmlReader {
 public:
  static absl::StatusOr<XmlElement> Parse(std::string_view doc) {
    XmlReader r(doc);
    r.SkipMisc();
    XmlElement root;
    if (absl::Status s = r.Element(root); !s.ok()) return s;
    r.SkipMisc();
    if (r.pos_ != doc.size()) return r.Error("content after the root element");
    return root;
  }

 private:
  explicit XmlReader(std::string_view doc) : doc_(doc) {}

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("XML at byte ", pos_, ": ", what));
  }
  bool Starts(std::string_view s) const { return doc_.substr(pos_, s.size()) == s; }
  void SkipSpace() {
    while (pos_ < doc_.size() &&
           std::string_view(" \t\r\n").find(doc_[pos_]) != std::string_view::npos)
      ++pos_;
  }
  // Whitespace, the <?xml ...?> declaration and comments.
  void SkipMisc() {
    for (;;) {
      SkipSpace();
      const std::string_view end = Starts("<?") ? "?>" : Starts("<!--") ? "-->" : "";
      if (end.empty()) return;
      const size_t at = doc_.find(end, pos_);
      pos_ = at == std::string_view::npos ? doc_.size() : at + end.size();
    }
  }
  std::string Name() {
    const size_t begin = pos_;
    while (pos_ < doc_.size() &&
           (isalnum(static_cast<unsigned char>(doc_[pos_])) ||
            std::string_view("-_:.").find(doc_[pos_]) != std::string_view::npos)) {
      ++pos_;
    }
    return std::string(doc_.substr(begin, pos_ - begin));
  }
  // Character data up to `stop`, entities decoded.
  absl::StatusOr<std::string> Chars(char stop) {
    std::string out;
    while (pos_ < doc_.size() && doc_[pos_] != stop) {
      const char c = doc_[pos_];
      if (c == '<') return Error("raw '<' in character data");
      if (c != '&') {
        out += c;
        ++pos_;
        continue;
      }
      const size_t semi = doc_.find(';', pos_);
      if (semi == std::string_view::npos) return Error("unterminated entity");
      const std::string_view ent = doc_.substr(pos_ + 1, semi - pos_ - 1);
      static const std::map<std::string_view, char> kNamed = {
          {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
      if (auto it = kNamed.find(ent); it != kNamed.end()) {
        out += it->second;
      } else if (ent.size() > 1 && ent[0] == '#') {
        out += '?';  // a character reference; its value does not matter here
      } else {
        return Error("unknown entity &" + std::string(ent) + ";");
      }
      pos_ = semi + 1;
    }
    return out;
  }
  absl::Status Attributes(XmlElement& e) {
    for (;;) {
      SkipSpace();
      if (Starts("/>") || Starts(">")) return absl::OkStatus();
      const std::string key = Name();
      if (key.empty()) return Error("expected an attribute name");
      SkipSpace();
      if (!Starts("=")) return Error("attribute without '='");
      ++pos_;
      SkipSpace();
      if (pos_ >= doc_.size() || (doc_[pos_] != '"' && doc_[pos_] != '\'')) {
        return Error("unquoted attribute value");
      }
      const char quote = doc_[pos_++];
      absl::StatusOr<std::string> value = Chars(quote);
      if (!value.ok()) return value.status();
      if (pos_ >= doc_.size()) return Error("unterminated attribute value");
      ++pos_;
      if (!e.attrs.emplace(key, *value).second) return Error("duplicate attribute " + key);
    }
  }
  absl::Status Element(XmlElement& e) {
    if (!Starts("<")) return Error("expected an element");
    ++pos_;
    e.name = Name();
    if (e.name.empty()) return Error("expected an element name");
    if (absl::Status s = Attributes(e); !s.ok()) return s;
    if (Starts("/>")) {
      pos_ += 2;
      return absl::OkStatus();
    }
    ++pos_;  // '>'
    for (;;) {
      absl::StatusOr<std::string> text = Chars('<');
      if (!text.ok()) return text.status();
      e.text += *text;
      if (pos_ >= doc_.size()) return Error("unclosed <" + e.name + ">");
      if (Starts("<!--")) {
        SkipMisc();
      } else if (Starts("</")) {
        pos_ += 2;
        if (Name() != e.name) return Error("mismatched closing tag of <" + e.name + ">");
        SkipSpace();
        if (!Starts(">")) return Error("expected '>'");
        ++pos_;
        return absl::OkStatus();
      } else {
        e.children.emplace_back();
        if (absl::Status s = Element(e.children.back()); !s.ok()) return s;
      }
    }
  }

  std::string_view doc_;
  size_t pos_ = 0;
};

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_SUPPORT_XML_READER_H_
