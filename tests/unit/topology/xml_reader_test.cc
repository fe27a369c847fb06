// The bounded XML reader: what it accepts, and clear errors (with lines) for malformed,
// truncated and hostile input instead of crashes, hangs or unbounded memory.
#include <gtest/gtest.h>

#include <string>

#include "topology/xml_reader.hpp"

namespace xport::topology {
namespace {

std::string error_of(const std::string& text, const xml::Limits& limits = {}) {
  auto d = xml::parse(text, limits);
  return d.ok() ? std::string("OK") : d.status().message();
}

TEST(TopologyXmlReader, ReadsElementsAttributesAndEntities) {
  auto d = xml::parse(
      "\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
      "<!-- c -->\n<a x='1' y=\"&lt;&amp;&#65;&#x42;&quot;\">text<b/>\n<![CDATA[<ignored>]]>"
      "<c z=\"2\"><d/></c ></a>\n<!-- tail -->\n");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const xml::Element& a = d->root();
  EXPECT_EQ(a.name, "a");
  ASSERT_NE(a.attribute("y"), nullptr);
  EXPECT_EQ(*a.attribute("y"), "<&AB\"");
  EXPECT_EQ(a.attribute("nope"), nullptr);
  ASSERT_EQ(a.children.size(), 2u);
  const xml::Element& c = d->elements[a.children[1]];
  EXPECT_EQ(c.name, "c");
  EXPECT_EQ(c.line, 5);
  EXPECT_EQ(c.depth, 1);
  ASSERT_EQ(c.children.size(), 1u);
  EXPECT_EQ(d->elements[c.children[0]].depth, 2);
}

TEST(TopologyXmlReader, MalformedInputGivesLineNumberedErrors) {
  struct Case {
    const char* text;
    const char* needle;
  } cases[] = {
      {"", "empty"},
      {"   \n  ", "no root element"},
      {"hello", "text before the root element"},
      {"<a>", "input ends inside <a> (truncated?)"},
      {"<a><b></a>", "end tag </a> does not match <b>"},
      {"<a x=1/>", "value of attribute 'x' is not quoted"},
      {"<a x='1/>", "unterminated value of attribute 'x'"},
      {"<a x='1' x='2'/>", "attribute 'x' repeated"},
      {"<a x/>", "expected '=' after attribute 'x'"},
      {"<a x='1'y='2'/>", "expected whitespace"},
      {"<a x='&foo;'/>", "unknown entity '&foo;'"},
      {"<a x='&#0;'/>", "not a valid character"},
      {"<a x='&#xD800;'/>", "not a valid character"},
      {"<a x='&#x110000;'/>", "out of range"},
      {"<a x='a < b'/>", "'<' inside an attribute value"},
      {"<a x='& b'/>", "'&' without a valid entity"},
      {"<a/><b/>", "content after the end of the root element"},
      {"<a><!-- open", "unterminated comment"},
      {"<1a/>", "expected an element name"},
      {"<a></>", "expected an end tag name"},
      {"<a>\n\n<b>\0</b></a>", "line 3: NUL byte"},
      {"<!DOCTYPE a [<!ENTITY x \"y\">]><a/>", "internal subset is not accepted"},
      {"<a/><!DOCTYPE a>", "DOCTYPE after the root element"},
      {"<a><!ELEMENT a ANY></a>", "unexpected '<!' markup"},
      {"<a", "input ends inside the start tag <a> (truncated?)"},
  };
  for (const Case& c : cases) {
    // Some cases carry a NUL inside: take the literal's full length from the array.
    std::string text = c.text;
    if (std::string(c.needle).find("NUL") != std::string::npos)
      text = std::string("<a>\n\n<b>\0</b></a>", 17);
    std::string got = error_of(text);
    EXPECT_NE(got.find(c.needle), std::string::npos) << "input '" << c.text << "' gave: " << got;
    if (got != "OK") {
      EXPECT_EQ(got.rfind("XML", 0), 0u) << got;
    }
  }
}

TEST(TopologyXmlReader, LimitsAreEnforcedBeforeMemoryIsSpent) {
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "<a>";
  EXPECT_NE(error_of(deep).find("nested deeper than 128 levels"), std::string::npos);
  xml::Limits small;
  small.max_depth = 3;
  EXPECT_NE(error_of("<a><b><c><d><e/></d></c></b></a>", small).find("deeper than 3"),
            std::string::npos);

  std::string many_attrs = "<a";
  for (int i = 0; i < 70; ++i) many_attrs += " a" + std::to_string(i) + "='1'";
  many_attrs += "/>";
  EXPECT_NE(error_of(many_attrs).find("more than 64 attributes"), std::string::npos);

  small = {};
  small.max_elements = 10;
  std::string wide = "<a>";
  for (int i = 0; i < 20; ++i) wide += "<b/>";
  wide += "</a>";
  EXPECT_NE(error_of(wide, small).find("more than 10 elements"), std::string::npos);

  small = {};
  small.max_bytes = 100;
  EXPECT_NE(error_of(std::string(200, ' ') + "<a/>", small).find("more than the limit"),
            std::string::npos);

  small = {};
  small.max_name = 8;
  EXPECT_NE(error_of("<abcdefghijkl/>", small).find("longer than 8"), std::string::npos);
  small.max_value = 4;
  EXPECT_NE(error_of("<a x='123456'/>", small).find("longer than 4 bytes"), std::string::npos);
}

TEST(TopologyXmlReader, TruncationAtEveryByteIsAnErrorNotACrash) {
  const std::string doc =
      "<?xml version=\"1.0\"?><topology version=\"2.0\"><object type=\"Machine\" os_index=\"0\">"
      "<!-- x --><info name=\"a\" value=\"&amp;\"/></object></topology>";
  ASSERT_TRUE(xml::parse(doc).ok());
  for (size_t n = 0; n < doc.size(); ++n) {
    auto d = xml::parse(doc.substr(0, n));
    EXPECT_FALSE(d.ok()) << "prefix of " << n << " bytes parsed";
  }
}

}  // namespace
}  // namespace xport::topology
