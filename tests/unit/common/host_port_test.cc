// CheckHostPort / CheckHostPortList (pipeplan/common/host_port.h): what a
// --listen or --planner flag may name, refused as usage errors naming it.
#include "pipeplan/common/host_port.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "pipeplan/common/exit_code.h"
#include "pipeplan/common/flag_set.h"

namespace pipeplan::common {
namespace {

TEST(HostPort, AcceptsHostPortIpv6AndUnix) {
  for (const char* ok : {"127.0.0.1:7600", "localhost:0", "[::1]:7600", "0.0.0.0:65535",
                         "unix:/run/pipeplan.sock"}) {
    EXPECT_TRUE(CheckHostPort("listen", ok).ok()) << ok;
  }
}

TEST(HostPort, RefusesWhatGrpcWouldMisreadNamingTheFlag) {
  for (const char* bad : {"nonsense", "127.0.0.1", "127.0.0.1:", ":7600", "host:http", "host:65536",
                          "host:-1", "host:+5", "::1:7600", "[::1:7600", "unix:"}) {
    const absl::Status s = CheckHostPort("listen", bad);
    EXPECT_TRUE(IsUsageError(s)) << bad << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "--listen")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), bad)) << s;
  }
}

TEST(HostPort, ListChecksEveryReplica) {
  EXPECT_TRUE(CheckHostPortList("planner", "127.0.0.1:1,127.0.0.1:2").ok());
  EXPECT_TRUE(CheckHostPortList("planner", "127.0.0.1:1, 127.0.0.1:2,").ok());
  const absl::Status s = CheckHostPortList("planner", "127.0.0.1:1,127.0.0.1");
  EXPECT_TRUE(IsUsageError(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "\"127.0.0.1\"")) << s;
  EXPECT_TRUE(IsUsageError(CheckHostPortList("planner", "")));
  EXPECT_TRUE(IsUsageError(CheckHostPortList("planner", ",")));
}

TEST(ClosestName, SuggestsOnlyCloseNames) {
  const std::vector<std::string> names = {"jobs list", "jobs show", "plan", "simulate"};
  EXPECT_EQ(ClosestName("jobs lsit", names), "jobs list");
  EXPECT_EQ(ClosestName("plna", names), "plan");
  EXPECT_EQ(ClosestName("frob", names), "");
}

}  // namespace
}  // namespace pipeplan::common
