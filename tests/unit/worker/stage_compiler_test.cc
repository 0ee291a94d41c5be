// The stage cache key: stages compiled by one version of the compiler are
// never reused by another (a cache written before dropout was seeded drew
// unseeded masks), while the same compiler and plan hit the same folder.
#include "training/stage_compiler.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace pipeplan::worker {
namespace {

void Write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

TEST(StageCompilerTest, CacheFolderChangesWithTheCompilersSources) {
  testing::TempDir dir;
  const std::filesystem::path root(dir.path());
  Write(root / "pipeplan_stage_compile.py", "print('compile')\n");
  Write(root / "pipeplan" / "rng.py", "SEEDED = False\n");
  Write(root / "pipeplan" / "export" / "trace.py", "X = 1\n");
  Write(root / "pipeplan" / "notes.txt", "not code\n");
  StageCompileRequest r{.script = (root / "pipeplan_stage_compile.py").string(),
                        .package_digest = "0123456789abcdef0123",
                        .node_stage = {0, 0, 1},
                        .microbatch_size = 4,
                        .cache_dir = "/cache"};
  const std::string before = CompiledStagesDir(r);
  EXPECT_EQ(CompiledStagesDir(r), before);  // stable: the same compiler hits
  EXPECT_EQ(before.rfind("/cache/0123456789abcdef-", 0), 0u) << before;

  Write(root / "pipeplan" / "notes.txt", "still not code\n");
  EXPECT_EQ(CompiledStagesDir(r), before);
  Write(root / "pipeplan" / "rng.py", "SEEDED = True\n");
  const std::string seeded = CompiledStagesDir(r);
  EXPECT_NE(seeded, before);
  Write(root / "pipeplan" / "export" / "trace.py", "X = 2\n");
  EXPECT_NE(CompiledStagesDir(r), seeded);
  const std::string traced = CompiledStagesDir(r);
  Write(root / "pipeplan_stage_compile.py", "print('compile v2')\n");
  EXPECT_NE(CompiledStagesDir(r), traced);

  StageCompileRequest other = r;
  other.node_stage = {0, 1, 1};
  EXPECT_NE(CompiledStagesDir(other), CompiledStagesDir(r));
}

}  // namespace
}  // namespace pipeplan::worker
