// Strict, bounded XML reading for topology input: iterative (no recursion on nesting), every
// limit checked before memory is spent, errors carry the line number.
#include "topology/xml_reader.hpp"

#include <cstring>

#include "core/format.hpp"

namespace xport::topology::xml {

const std::string* Element::attribute(std::string_view attr_name) const {
  for (const Attribute& a : attributes)
    if (a.name == attr_name) return &a.value;
  return nullptr;
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

class Reader {
 public:
  Reader(std::string_view text, const Limits& limits) : s_(text), limits_(limits) {}

  Result<Document> run() {
    if (s_.size() > limits_.max_bytes)
      return core::error(Code::invalid_argument, "XML input is ", s_.size(),
                         " bytes, more than the limit of ", limits_.max_bytes);
    if (s_.empty()) return core::error(Code::invalid_argument, "XML input is empty");
    if (std::memchr(s_.data(), '\0', s_.size()) != nullptr) {
      size_t at = static_cast<size_t>(
          static_cast<const char*>(std::memchr(s_.data(), '\0', s_.size())) - s_.data());
      move_to(at);
      return fail("NUL byte in the input (not a text file?)");
    }
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") move_to(3);
    XPORT_RETURN_IF_ERROR(skip_misc(/*allow_doctype=*/true));
    if (at_end()) return fail("no root element");
    if (peek() != '<') return fail("text before the root element");
    XPORT_RETURN_IF_ERROR(read_elements());
    XPORT_RETURN_IF_ERROR(skip_misc(/*allow_doctype=*/false));
    if (!at_end()) return fail("content after the end of the root element");
    return std::move(doc_);
  }

 private:
  bool at_end() const { return pos_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  bool starts_with(std::string_view p) const { return s_.substr(pos_, p.size()) == p; }

  // Every forward move goes through here so the line count stays exact.
  void move_to(size_t to) {
    if (to > s_.size()) to = s_.size();
    for (size_t i = pos_; i < to; ++i) line_ += s_[i] == '\n';
    pos_ = to;
  }
  void advance(size_t n) { move_to(pos_ + n); }
  void skip_spaces() {
    size_t p = pos_;
    while (p < s_.size() && is_space(s_[p])) ++p;
    move_to(p);
  }

  template <typename... Args>
  Status fail(Args&&... what) {
    return core::error(Code::invalid_argument, "XML line ", line_, ": ",
                       std::forward<Args>(what)...);
  }

  // Skips to just past `terminator`; `what` names the construct for the error.
  Status skip_past(std::string_view terminator, std::string_view what) {
    size_t found = s_.find(terminator, pos_);
    if (found == std::string_view::npos) return fail("unterminated ", what, " (input truncated?)");
    move_to(found + terminator.size());
    return Status::success();
  }

  // Whitespace, comments, processing instructions (and one DOCTYPE in the prolog).
  Status skip_misc(bool allow_doctype) {
    while (true) {
      skip_spaces();
      if (starts_with("<!--")) {
        XPORT_RETURN_IF_ERROR(skip_past("-->", "comment"));
      } else if (starts_with("<?")) {
        XPORT_RETURN_IF_ERROR(skip_past("?>", "processing instruction"));
      } else if (starts_with("<!DOCTYPE")) {
        if (!allow_doctype) return fail("DOCTYPE after the root element");
        size_t end = s_.find('>', pos_);
        size_t subset = s_.find('[', pos_);
        if (end == std::string_view::npos) return fail("unterminated DOCTYPE (input truncated?)");
        // Internal subsets declare entities: refusing them rules out entity-expansion bombs.
        if (subset != std::string_view::npos && subset < end)
          return fail("DOCTYPE with an internal subset is not accepted");
        move_to(end + 1);
        allow_doctype = false;
      } else {
        return Status::success();
      }
    }
  }

  Status read_name(std::string& out, std::string_view what) {
    if (!is_name_start(peek())) {
      if (at_end()) return fail("input ends where ", what, " should be (truncated?)");
      return fail("expected ", what, ", found '", printable(peek()), "'");
    }
    size_t p = pos_;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    if (p - pos_ > limits_.max_name)
      return fail(what, " longer than ", limits_.max_name, " characters");
    out.assign(s_.substr(pos_, p - pos_));
    move_to(p);
    return Status::success();
  }

  static std::string printable(char c) {
    if (c >= 0x20 && c < 0x7f) return std::string(1, c);
    return core::str("\\x", "0123456789abcdef"[(c >> 4) & 0xf], "0123456789abcdef"[c & 0xf]);
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  // Decodes `raw` (an attribute value) into `out`: the five predefined entities and character
  // references only.
  Status decode(std::string_view raw, std::string& out) {
    out.clear();
    out.reserve(raw.size());
    for (size_t i = 0; i < raw.size();) {
      char c = raw[i];
      if (c == '<') return fail("'<' inside an attribute value");
      if (c != '&') {
        // Attribute-value normalization: whitespace characters become spaces.
        out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
        ++i;
        continue;
      }
      size_t semi = raw.find(';', i);
      if (semi == std::string_view::npos || semi - i > 12)
        return fail("'&' without a valid entity in an attribute value");
      std::string_view ent = raw.substr(i + 1, semi - i - 1);
      if (ent == "lt")
        out += '<';
      else if (ent == "gt")
        out += '>';
      else if (ent == "amp")
        out += '&';
      else if (ent == "quot")
        out += '"';
      else if (ent == "apos")
        out += '\'';
      else if (ent.size() >= 2 && ent[0] == '#') {
        bool hex = ent[1] == 'x';
        std::string_view digits = ent.substr(hex ? 2 : 1);
        if (digits.empty()) return fail("empty character reference '&", ent, ";'");
        uint32_t cp = 0;
        for (char d : digits) {
          int v = -1;
          if (d >= '0' && d <= '9')
            v = d - '0';
          else if (hex && d >= 'a' && d <= 'f')
            v = d - 'a' + 10;
          else if (hex && d >= 'A' && d <= 'F')
            v = d - 'A' + 10;
          if (v < 0) return fail("bad character reference '&", ent, ";'");
          cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
          if (cp > 0x10ffff) return fail("character reference '&", ent, ";' out of range");
        }
        if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff))
          return fail("character reference '&", ent, ";' is not a valid character");
        append_utf8(out, cp);
      } else {
        return fail("unknown entity '&", ent, ";' (only the predefined entities are accepted)");
      }
      i = semi + 1;
    }
    return Status::success();
  }

  // Reads a start tag's name and attributes; sets `self_closing`.
  Status read_start_tag(Element& e, bool& self_closing) {
    advance(1);  // '<'
    e.line = line_;
    XPORT_RETURN_IF_ERROR(read_name(e.name, "an element name"));
    while (true) {
      bool had_space = is_space(peek());
      skip_spaces();
      if (at_end()) return fail("input ends inside the start tag <", e.name, "> (truncated?)");
      if (starts_with("/>")) {
        advance(2);
        self_closing = true;
        return Status::success();
      }
      if (peek() == '>') {
        advance(1);
        self_closing = false;
        return Status::success();
      }
      if (!had_space) return fail("expected whitespace, '>' or '/>' in <", e.name, ">");
      if (e.attributes.size() == limits_.max_attributes)
        return fail("element <", e.name, "> has more than ", limits_.max_attributes, " attributes");
      Attribute a;
      XPORT_RETURN_IF_ERROR(read_name(a.name, "an attribute name"));
      for (const Attribute& other : e.attributes)
        if (other.name == a.name)
          return fail("attribute '", a.name, "' repeated in <", e.name, ">");
      skip_spaces();
      if (peek() != '=') return fail("expected '=' after attribute '", a.name, "'");
      advance(1);
      skip_spaces();
      char quote = peek();
      if (quote != '"' && quote != '\'')
        return fail("value of attribute '", a.name, "' is not quoted");
      size_t end = s_.find(quote, pos_ + 1);
      if (end == std::string_view::npos)
        return fail("unterminated value of attribute '", a.name, "' (input truncated?)");
      if (end - pos_ - 1 > limits_.max_value)
        return fail("value of attribute '", a.name, "' longer than ", limits_.max_value, " bytes");
      std::string_view raw = s_.substr(pos_ + 1, end - pos_ - 1);
      XPORT_RETURN_IF_ERROR(decode(raw, a.value));
      move_to(end + 1);
      e.attributes.push_back(std::move(a));
    }
  }

  Status add_element(Element&& e, uint32_t parent, int depth, uint32_t& index) {
    if (doc_.elements.size() >= limits_.max_elements)
      return fail("more than ", limits_.max_elements, " elements");
    if (depth > limits_.max_depth)
      return fail("elements nested deeper than ", limits_.max_depth, " levels");
    index = static_cast<uint32_t>(doc_.elements.size());
    e.parent = parent;
    e.depth = depth;
    doc_.elements.push_back(std::move(e));
    if (index != parent) doc_.elements[parent].children.push_back(index);
    return Status::success();
  }

  // The root element and everything inside it, with an explicit stack of open elements.
  Status read_elements() {
    std::vector<uint32_t> open;
    {
      Element root;
      bool self_closing = false;
      XPORT_RETURN_IF_ERROR(read_start_tag(root, self_closing));
      uint32_t index = 0;
      XPORT_RETURN_IF_ERROR(add_element(std::move(root), 0, 0, index));
      if (self_closing) return Status::success();
      open.push_back(index);
    }
    while (!open.empty()) {
      // Text content is skipped; it carries nothing a topology needs.
      size_t lt = s_.find('<', pos_);
      if (lt == std::string_view::npos)
        return fail("input ends inside <", doc_.elements[open.back()].name, "> (truncated?)");
      move_to(lt);
      if (starts_with("<!--")) {
        XPORT_RETURN_IF_ERROR(skip_past("-->", "comment"));
      } else if (starts_with("<![CDATA[")) {
        XPORT_RETURN_IF_ERROR(skip_past("]]>", "CDATA section"));
      } else if (starts_with("<?")) {
        XPORT_RETURN_IF_ERROR(skip_past("?>", "processing instruction"));
      } else if (starts_with("<!")) {
        return fail("unexpected '<!' markup inside <", doc_.elements[open.back()].name, ">");
      } else if (starts_with("</")) {
        advance(2);
        std::string name;
        XPORT_RETURN_IF_ERROR(read_name(name, "an end tag name"));
        skip_spaces();
        if (peek() != '>') return fail("expected '>' to close </", name, ">");
        advance(1);
        const std::string& expected = doc_.elements[open.back()].name;
        if (name != expected)
          return fail("end tag </", name, "> does not match <", expected, "> opened on line ",
                      doc_.elements[open.back()].line);
        open.pop_back();
      } else {
        Element e;
        bool self_closing = false;
        XPORT_RETURN_IF_ERROR(read_start_tag(e, self_closing));
        uint32_t index = 0;
        int depth = static_cast<int>(open.size());
        XPORT_RETURN_IF_ERROR(add_element(std::move(e), open.back(), depth, index));
        if (!self_closing) open.push_back(index);
      }
    }
    return Status::success();
  }

  std::string_view s_;
  const Limits& limits_;
  size_t pos_ = 0;
  int line_ = 1;
  Document doc_;
};

}  // namespace

Result<Document> parse(std::string_view text, const Limits& limits) {
  Reader reader(text, limits);
  return reader.run();
}

}  // namespace xport::topology::xml
