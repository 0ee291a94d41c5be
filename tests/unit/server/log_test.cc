#include "pipeplan/server/obs/log.h"

#include <gtest/gtest.h>

namespace pipeplan::server {
namespace {

TEST(LogValue, PlainValuesStayBare) {
  EXPECT_EQ(LogValue("job-1a2b"), "job-1a2b");
  EXPECT_EQ(LogValue("0.25"), "0.25");
  EXPECT_EQ(LogValue("gpu0/é"), "gpu0/é");  // UTF-8 passes through
}

TEST(LogValue, SeparatorsAreQuoted) {
  EXPECT_EQ(LogValue(""), "\"\"");
  EXPECT_EQ(LogValue("test replan"), "\"test replan\"");
  EXPECT_EQ(LogValue("a=b"), "\"a=b\"");
  EXPECT_EQ(LogValue("say \"hi\""), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(LogValue("C:\\x"), "\"C:\\\\x\"");
}

// A client-chosen job name can neither start a forged log line nor reach a
// terminal as an escape sequence.
TEST(LogValue, ControlBytesAreEscaped) {
  const std::string forged = "bert\nts=2024-01-01T00:00:00.000Z level=info event=job_deleted";
  const std::string v = LogValue(forged);
  EXPECT_EQ(v.find('\n'), std::string::npos);
  EXPECT_EQ(v, "\"bert\\nts=2024-01-01T00:00:00.000Z level=info event=job_deleted\"");
  EXPECT_EQ(LogValue("a\rb"), "\"a\\rb\"");
  EXPECT_EQ(LogValue("a\tb"), "\"a\\tb\"");
  EXPECT_EQ(LogValue("\x1b[31mred"), "\"\\x1b[31mred\"");
  EXPECT_EQ(LogValue(std::string("nul\0x", 5)), "\"nul\\x00x\"");
  EXPECT_EQ(LogValue("del\x7f"), "\"del\\x7f\"");
  for (int c = 0; c < 0x20; ++c) {
    const std::string out = LogValue(std::string(1, static_cast<char>(c)));
    for (char o : out) EXPECT_GE(static_cast<unsigned char>(o), 0x20) << c;
  }
}

}  // namespace
}  // namespace pipeplan::server
