// The CPU pool a worker reports (v1::CpuUse): the machine and the CPUs this
// process may run on.
#include "pipeplan/worker/report/cpu_use.h"

#include <sched.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pipeplan::worker {
namespace {

TEST(CpuUseTest, ListsCpusAsRanges) {
  EXPECT_EQ(CpuListString({}), "");
  EXPECT_EQ(CpuListString({3}), "3");
  EXPECT_EQ(CpuListString({5, 0, 2, 1, 2}), "0-2,5");
  EXPECT_EQ(CpuListString({0, 1, 3, 4, 7}), "0-1,3-4,7");
}

TEST(CpuUseTest, NamesThisProcessesAffinity) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const std::optional<v1::CpuUse> use = CurrentCpuUse(2);
  ASSERT_TRUE(use.has_value());
  EXPECT_EQ(use->cpus(), CPU_COUNT(&set));
  EXPECT_EQ(use->threads(), 2);
  // "<host>:<cpus>", the same for every worker of this process's machine
  // and CPU set.
  EXPECT_TRUE(absl::StrContains(use->pool(), ":")) << use->pool();
  EXPECT_EQ(use->pool(), CurrentCpuUse(1)->pool());
}

TEST(CpuUseTest, ComputesOffTheCpuReportNoPool) {
  EXPECT_FALSE(CurrentCpuUse(0).has_value());
  EXPECT_FALSE(CurrentCpuUse(-1).has_value());
}

}  // namespace
}  // namespace pipeplan::worker
