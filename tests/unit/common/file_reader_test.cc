#include "pipeplan/common/file_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace pipeplan::common {
namespace {

class FileReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pipeplan_file_reader_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(FileReaderTest, ReadsTextAndBytesExactly) {
  std::string text("graph\0with a nul\n", 17);
  std::string path = Write("g.json", text);
  absl::StatusOr<std::string> s = ReadFileToString(path, "graph");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, text);
  absl::StatusOr<std::vector<char>> b = ReadFileBytes(path, "graph");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(std::string(b->begin(), b->end()), text);
}

TEST_F(FileReaderTest, EmptyFileIsNotAnError) {
  absl::StatusOr<std::string> s = ReadFileToString(Write("empty", ""), "graph");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->empty());
}

TEST_F(FileReaderTest, MissingFileIsNotFoundNamingWhatAndPath) {
  std::string path = (dir_ / "no_such.json").string();
  absl::StatusOr<std::string> s = ReadFileToString(path, "cluster");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("cluster"), std::string::npos);
  EXPECT_NE(s.status().message().find(path), std::string::npos);
  EXPECT_EQ(ReadFileBytes(path).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadFileToString((dir_ / "no_dir" / "x").string()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(FileReaderTest, DirectoryIsFailedPrecondition) {
  EXPECT_EQ(ReadFileToString(dir_.string()).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadFileBytes(dir_.string()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FileReaderTest, UnreadableFileIsPermissionDenied) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file; permission bits cannot deny it";
  std::string path = Write("secret", "x");
  std::filesystem::permissions(path, std::filesystem::perms::none);
  EXPECT_EQ(ReadFileToString(path).status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace pipeplan::common
