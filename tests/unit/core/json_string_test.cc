// Hand-written JSON (traces, CLI reports) escapes what JSON requires and
// passes everything else through.
#include "pipeplan/core/json_string.h"

#include <string>

#include "gtest/gtest.h"

namespace pipeplan {
namespace {

TEST(JsonString, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonString(""), "\"\"");
  EXPECT_EQ(JsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString("l1\nl2\r\t"), "\"l1\\nl2\\r\\t\"");
  EXPECT_EQ(JsonString(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonString(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
}

TEST(JsonString, PassesUtf8AndPrintableAsciiThrough) {
  EXPECT_EQ(JsonString("stage s3 mb5 \xc3\xa9\xe2\x82\xac"),
            "\"stage s3 mb5 \xc3\xa9\xe2\x82\xac\"");
  EXPECT_EQ(JsonString("/ < > & '"), "\"/ < > & '\"");
}

}  // namespace
}  // namespace pipeplan
