// A small, strict, bounded XML reader for topology files (hwloc and NCCL XML). It reads elements
// and attributes only, never expands entities beyond the predefined ones, and refuses input past
// its size, depth, element and attribute limits with an error naming the line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "xport/status.hpp"

namespace xport::topology::xml {

struct Limits {
  size_t max_bytes = size_t{64} << 20;
  int max_depth = 128;         // hwloc's deepest real trees are ~30 levels
  size_t max_attributes = 64;  // per element; hwloc objects carry about a dozen
  size_t max_elements = 1u << 20;
  size_t max_name = 256;        // element and attribute names
  size_t max_value = 1u << 20;  // one attribute value
};

struct Attribute {
  std::string name;
  std::string value;  // entities decoded
};

struct Element {
  std::string name;
  std::vector<Attribute> attributes;
  std::vector<uint32_t> children;  // indexes into Document::elements, in document order
  uint32_t parent = 0;             // the root is its own parent
  int line = 0;
  int depth = 0;  // the root is 0

  // The attribute's value, or nullptr when absent.
  const std::string* attribute(std::string_view attr_name) const;
};

struct Document {
  std::vector<Element> elements;  // elements[0] is the root
  const Element& root() const { return elements.front(); }
};

// Text content, comments, processing instructions and a DOCTYPE without an internal subset are
// skipped; anything else malformed is an error "XML line N: what".
Result<Document> parse(std::string_view text, const Limits& limits = {});

}  // namespace xport::topology::xml
